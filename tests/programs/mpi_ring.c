/* A token ring with one late rank, for sigmatop's wait tests (tests/waits.rs).
 *
 * Each rank receives the token from its left neighbour (rank - 1) and sends it to its right
 * (rank + 1), rank 0 sending first: blocking MPI_Recv and MPI_Send of MPI_RING_BYTES bytes
 * (default 4096) with tag RING_TAG, MPI_RING_ROUNDS times (default 400). Rank 0 sleeps
 * MPI_RING_PACE_US microseconds (default 5000) before each of its sends, so that the ring runs
 * for a while (400 × 5 ms = 2 s) before and after the stall. In round MPI_RING_STALL_ROUND
 * (default ROUNDS / 2) the rank MPI_RING_STALL_RANK (default the last) sleeps MPI_RING_SLEEP_S
 * seconds (default 20) after its receive and before its send: meanwhile rank 0 waits for it
 * (its receive posted), rank 1 for rank 0, rank 2 for rank 1..., and it waits for nobody.
 * The token carries the round; every rank checks it. Rank 0 prints one line at the end.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RING_TAG 77

static long env_or(const char *name, long dflt)
{
    const char *v = getenv(name);
    return v != NULL && *v != 0 ? atol(v) : dflt;
}

int main(int argc, char **argv)
{
    int rank, size;
    long round, errors = 0;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long bytes = env_or("MPI_RING_BYTES", 4096);
    long rounds = env_or("MPI_RING_ROUNDS", 400);
    long pace_us = env_or("MPI_RING_PACE_US", 5000);
    long stall_round = env_or("MPI_RING_STALL_ROUND", rounds / 2);
    long stall_rank = env_or("MPI_RING_STALL_RANK", size - 1);
    long sleep_s = env_or("MPI_RING_SLEEP_S", 20);
    if (bytes < (long)sizeof(long))
        bytes = sizeof(long);
    char *token = malloc(bytes);
    if (token == NULL || size < 2)
        MPI_Abort(MPI_COMM_WORLD, 2);
    int left = (rank + size - 1) % size, right = (rank + 1) % size;
    for (round = 0; round < rounds; round++) {
        long got;
        if (rank == 0) {
            usleep(pace_us);
            memset(token, 0, bytes);
            memcpy(token, &round, sizeof round);
            MPI_Send(token, (int)bytes, MPI_BYTE, right, RING_TAG, MPI_COMM_WORLD);
            MPI_Recv(token, (int)bytes, MPI_BYTE, left, RING_TAG, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(token, (int)bytes, MPI_BYTE, left, RING_TAG, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
            if (rank == stall_rank && round == stall_round) {
                fprintf(stderr, "mpi_ring: rank %d sleeps %ld s in round %ld\n", rank, sleep_s,
                        round);
                sleep((unsigned)sleep_s);
            }
            MPI_Send(token, (int)bytes, MPI_BYTE, right, RING_TAG, MPI_COMM_WORLD);
        }
        memcpy(&got, token, sizeof got);
        if (got != round)
            errors++;
    }
    free(token);
    if (errors != 0) {
        fprintf(stderr, "mpi_ring: rank %d: %ld tokens out of order\n", rank, errors);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    if (rank == 0)
        printf("mpi_ring: %d ranks, %ld rounds done\n", size, rounds);
    MPI_Finalize();
    return 0;
}
