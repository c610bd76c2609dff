/* The floor of issue 34's cold call: the same P = 2 sparse allreduce as scripts/cold_call.py
 * times (N = 16M, 16,777 sorted random nonzeros per rank, float32), written in C with no Python:
 * the agreement (a persistent MPI_Allreduce of 8 ints, as the library's since 9461e5b), the
 * input copied into a send buffer, one MPI_Sendrecv of the (index, value) pairs, a branch-free
 * merge (the two-slot selection of sparcml's merge_add_into) into result arrays allocated per
 * call (the library returns new arrays). "cold": right after a dense 64 MiB MPI_Allreduce;
 * "warm": right after that. Prints the medians of the slowest rank.
 *
 *   mpicc -O2 -o /tmp/cold_call_floor scripts/cold_call_floor.c   # the venv's mpicc
 *   mpiexec -n 2 /tmp/cold_call_floor 40                          # repetitions
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DIM (1 << 24)
#define NNZ 16777

static int by_value(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

static int by_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int merge_add(const int *ai, const float *av, int na, const int *bi, const float *bv,
                     int nb, int *oi, float *ov) {
    int i = 0, j = 0, o = 0;
    while (i < na && j < nb) {
        int x = ai[i], y = bi[j];
        int take_a = x <= y, take_b = y <= x;
        float from_a[2] = {-0.0f, av[i]}, from_b[2] = {-0.0f, bv[j]};
        oi[o] = take_a ? x : y;
        ov[o] = from_a[take_a] + from_b[take_b];
        i += take_a;
        j += take_b;
        o++;
    }
    for (; i < na; i++, o++) { oi[o] = ai[i]; ov[o] = av[i]; }
    for (; j < nb; j++, o++) { oi[o] = bi[j]; ov[o] = bv[j]; }
    return o;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int reps = argc > 1 ? atoi(argv[1]) : 30;
    if (size != 2 || reps < 1) {
        if (rank == 0) fprintf(stderr, "usage: mpiexec -n 2 %s [REPS >= 1]\n", argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    srand(rank + 1);
    int *idx = malloc(NNZ * sizeof(int));
    float *val = malloc(NNZ * sizeof(float));
    for (int i = 0; i < NNZ; i++) { idx[i] = rand() % DIM; val[i] = 1.0f; }
    qsort(idx, NNZ, sizeof(int), by_value);
    char *sendbuf = malloc(NNZ * 8), *recvbuf = malloc(NNZ * 8);
    float *big = malloc((size_t)DIM * 4), *big_sum = malloc((size_t)DIM * 4);
    for (size_t i = 0; i < DIM; i++) big[i] = 1.0f;
    double *cold = malloc(reps * sizeof(double)), *warm = malloc(reps * sizeof(double));
    int fields[8], agreed[8];
    MPI_Request agreement;
    MPI_Allreduce_init(fields, agreed, 8, MPI_INT, MPI_MAX, MPI_COMM_WORLD, MPI_INFO_NULL,
                       &agreement);
    int partner = 1 - rank;
    for (int r = -3; r < reps; r++) {  /* 3 untimed rounds first */
        for (int phase = 0; phase < 2; phase++) {
            if (phase == 0)
                MPI_Allreduce(big, big_sum, DIM, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            MPI_Barrier(MPI_COMM_WORLD);
            double t = MPI_Wtime();
            int head[8] = {DIM, 4, 0, 0, NNZ, 0, 0, 0};
            memcpy(fields, head, sizeof head);
            MPI_Start(&agreement);
            MPI_Wait(&agreement, MPI_STATUS_IGNORE);
            int *out_idx = malloc(2 * NNZ * sizeof(int));
            float *out_val = malloc(2 * NNZ * sizeof(float));
            memcpy(sendbuf, idx, NNZ * 4);
            memcpy(sendbuf + NNZ * 4, val, NNZ * 4);
            MPI_Sendrecv(sendbuf, NNZ * 8, MPI_BYTE, partner, 7, recvbuf, NNZ * 8, MPI_BYTE,
                         partner, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            int n = merge_add(idx, val, NNZ, (int *)recvbuf, (float *)(recvbuf + NNZ * 4), NNZ,
                              out_idx, out_val);
            t = MPI_Wtime() - t;
            free(out_idx);
            free(out_val);
            double slowest;
            MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            if (r >= 0) (phase == 0 ? cold : warm)[r] = slowest;
            if (n < NNZ || agreed[4] != NNZ) MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    qsort(cold, reps, sizeof(double), by_double);
    qsort(warm, reps, sizeof(double), by_double);
    if (rank == 0)
        printf("C floor, P = 2, N = %d, %d nonzeros: warm %.3f ms, after 64 MiB MPI_Allreduce "
               "%.3f ms, cold / warm %.2fx (medians of %d)\n", DIM, NNZ, warm[reps / 2] * 1e3,
               cold[reps / 2] * 1e3, cold[reps / 2] / warm[reps / 2], reps);
    MPI_Request_free(&agreement);
    MPI_Finalize();
    return 0;
}
