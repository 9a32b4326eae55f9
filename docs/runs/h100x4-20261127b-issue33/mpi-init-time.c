#include <mpi.h>
#include <stdio.h>
#include <time.h>
int main(int c,char**v){struct timespec a,b;clock_gettime(CLOCK_MONOTONIC,&a);int p;MPI_Init_thread(&c,&v,MPI_THREAD_FUNNELED,&p);clock_gettime(CLOCK_MONOTONIC,&b);int r;MPI_Comm_rank(MPI_COMM_WORLD,&r);double t=(b.tv_sec-a.tv_sec)+(b.tv_nsec-a.tv_nsec)/1e9;double m;MPI_Reduce(&t,&m,1,MPI_DOUBLE,MPI_MAX,0,MPI_COMM_WORLD);if(!r)printf("init max %.2f\n",m);MPI_Finalize();}
