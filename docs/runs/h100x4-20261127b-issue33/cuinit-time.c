#include <dlfcn.h>
#include <stdio.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec/1e9;}
int main(void){double a=now();void*h=dlopen("libcuda.so.1",RTLD_NOW);double b=now();if(!h){printf("nolib\n");return 1;}
int(*init)(unsigned)=(int(*)(unsigned))dlsym(h,"cuInit");int(*cnt)(int*)=(int(*)(int*))dlsym(h,"cuDeviceGetCount");
int r=init(0);double c=now();int n=-1;if(!r)cnt(&n);printf("dlopen %.3f cuInit %.3f rc %d count %d\n",b-a,c-b,r,n);return 0;}
