/* A known, uneven point-to-point pattern for sigmatop's MPI test (tests/ucx_mpi.rs).
 *
 * Every ordered pair of distinct ranks (src, dst) carries exactly one message of
 * (src + 1) * (dst + 2) * 1000 bytes, sent as MPI_INT (count = bytes / 4) with tag PATTERN_TAG by
 * a blocking MPI_Send and received by a blocking MPI_Recv of the same size. Pairs go one at a
 * time in a fixed order (src ascending, then dst ascending), so nothing can deadlock and no
 * message is ever in flight next to another. The receiver checks the payload. Rank 0 prints one
 * line at the end. No collective is called between MPI_Init and MPI_Finalize.
 *
 * With MPI_PATTERN_EXIT=N in the environment every rank fails for its own reasons instead: right
 * after MPI_Init it says so on stderr, calls MPI_Finalize and exits with status N, having sent
 * nothing (tests/first_day.rs: what sigmatop says about such a run).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define PATTERN_TAG 4242

static long pattern_bytes(int src, int dst) { return (long)(src + 1) * (dst + 2) * 1000; }

int main(int argc, char **argv)
{
    int rank, size, src, dst, errors = 0;
    long i, n, max = 0;
    int *buf;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (getenv("MPI_PATTERN_EXIT") != NULL) {
        int code = atoi(getenv("MPI_PATTERN_EXIT"));

        fprintf(stderr, "mpi_pattern: rank %d gives up with status %d (MPI_PATTERN_EXIT)\n", rank,
                code);
        MPI_Finalize();
        return code;
    }

    for (src = 0; src < size; src++)
        for (dst = 0; dst < size; dst++)
            if (pattern_bytes(src, dst) > max)
                max = pattern_bytes(src, dst);
    buf = malloc(max);
    if (buf == NULL)
        MPI_Abort(MPI_COMM_WORLD, 2);

    for (src = 0; src < size; src++) {
        for (dst = 0; dst < size; dst++) {
            if (src == dst)
                continue;
            n = pattern_bytes(src, dst) / (long)sizeof(int);
            if (rank == src) {
                for (i = 0; i < n; i++)
                    buf[i] = (int)(src * 1000003 + dst * 7919 + i);
                MPI_Send(buf, (int)n, MPI_INT, dst, PATTERN_TAG, MPI_COMM_WORLD);
            } else if (rank == dst) {
                MPI_Recv(buf, (int)n, MPI_INT, src, PATTERN_TAG, MPI_COMM_WORLD,
                         MPI_STATUS_IGNORE);
                for (i = 0; i < n; i++)
                    if (buf[i] != (int)(src * 1000003 + dst * 7919 + i))
                        errors++;
            }
        }
    }
    free(buf);
    if (errors != 0) {
        fprintf(stderr, "rank %d: %d corrupted elements\n", rank, errors);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    if (rank == 0)
        printf("mpi_pattern: %d ranks done\n", size);
    MPI_Finalize();
    return 0;
}
