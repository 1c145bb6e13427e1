/* Fires myprov:::myprobe(i, "tick i") every 100 ms, N times (argv[1], default
   100): a program built with dtrace -h and dtrace -G, whose constructor
   (DTrace's drti.o) hands its DOF to /dev/dtrace/helper at start. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "prov.h"

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 100;
	char buf[32];

	for (int i = 0; i < n; i++) {
		snprintf(buf, sizeof(buf), "tick %d", i);
		MYPROV_MYPROBE(i, buf);
		usleep(100000);
	}
	return 0;
}
