/* Receives larger than the messages that fill them, for sigmatop's MPI test (tests/ucx_mpi.rs,
 * issue 16): every receive is posted with a 13,312-byte buffer (3,328 MPI_INT), every message is
 * smaller. In each of ROUNDS rounds, every rank sends one message to every other rank of
 *   msg_bytes(src, dst, round) = 1024 * (src + 1) + 512 * dst + 8 * round   (at most 5,752 here)
 * bytes; even rounds receive with MPI_Irecv posted before the sends (UCX completes them through
 * the completion callback), odd rounds with blocking MPI_Recv after non-blocking sends (the
 * messages are usually there already: UCX completes the receive inside the call). In even rounds
 * each rank, once its receives are posted, tells every peer so with an empty message (tag
 * READY, a blocking MPI_Send and MPI_Recv of 0 bytes) and sends only when all peers did: no
 * collective, whose own messages no test could predict. The receiver checks the length MPI
 * reports (MPI_Get_count) and the payload. Rank 0 prints one line.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define ROUNDS 8
#define RECV_BYTES 13312
#define TAG 77
#define READY 78

static int msg_bytes(int src, int dst, int round) { return 1024 * (src + 1) + 512 * dst + 8 * round; }

static int value(int src, int dst, int round, int i) { return src * 1000003 + dst * 7919 + round * 31 + i; }

int main(int argc, char **argv)
{
    int rank, size, round, p, i, errors = 0;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    int *rbuf = malloc((size_t)size * RECV_BYTES);
    int *sbuf = malloc((size_t)size * RECV_BYTES);
    MPI_Request *rreq = malloc(sizeof(MPI_Request) * size);
    MPI_Request *sreq = malloc(sizeof(MPI_Request) * size);
    if (!rbuf || !sbuf || !rreq || !sreq)
        MPI_Abort(MPI_COMM_WORLD, 2);

    for (round = 0; round < ROUNDS; round++) {
        int nr = 0, ns = 0;
        for (p = 0; p < size; p++) {
            int *s = sbuf + (size_t)p * (RECV_BYTES / sizeof(int));
            for (i = 0; i < msg_bytes(rank, p, round) / (int)sizeof(int); i++)
                s[i] = value(rank, p, round, i);
        }
        if (round % 2 == 0) {
            for (p = 0; p < size; p++)
                if (p != rank)
                    MPI_Irecv(rbuf + (size_t)p * (RECV_BYTES / sizeof(int)), RECV_BYTES / sizeof(int),
                              MPI_INT, p, TAG, MPI_COMM_WORLD, &rreq[nr++]);
        }
        if (round % 2 == 0) {
            /* Everyone's receives of an even round are posted before anyone sends. */
            for (p = 0; p < size; p++)
                if (p != rank)
                    MPI_Send(NULL, 0, MPI_INT, p, READY, MPI_COMM_WORLD);
            for (p = 0; p < size; p++)
                if (p != rank)
                    MPI_Recv(NULL, 0, MPI_INT, p, READY, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
        for (p = 0; p < size; p++)
            if (p != rank)
                MPI_Isend(sbuf + (size_t)p * (RECV_BYTES / sizeof(int)),
                          msg_bytes(rank, p, round) / (int)sizeof(int), MPI_INT, p, TAG,
                          MPI_COMM_WORLD, &sreq[ns++]);
        for (p = 0; p < size; p++) {
            MPI_Status st;
            int n, *r = rbuf + (size_t)p * (RECV_BYTES / sizeof(int));
            if (p == rank)
                continue;
            if (round % 2 == 0) {
                int k = p < rank ? p : p - 1;
                MPI_Wait(&rreq[k], &st);
            } else {
                MPI_Recv(r, RECV_BYTES / sizeof(int), MPI_INT, p, TAG, MPI_COMM_WORLD, &st);
            }
            MPI_Get_count(&st, MPI_INT, &n);
            if (n * (int)sizeof(int) != msg_bytes(p, rank, round))
                errors++;
            for (i = 0; i < n; i++)
                if (r[i] != value(p, rank, round, i))
                    errors++;
        }
        MPI_Waitall(ns, sreq, MPI_STATUSES_IGNORE);
    }
    free(rbuf);
    free(sbuf);
    free(rreq);
    free(sreq);
    if (errors != 0) {
        fprintf(stderr, "rank %d: %d errors\n", rank, errors);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    if (rank == 0)
        printf("mpi_larger_recv: %d ranks, %d rounds done\n", size, ROUNDS);
    MPI_Finalize();
    return 0;
}
