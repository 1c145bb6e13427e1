/* The provider of the DOF USDT proof (test/guests/usdt.sh). */
provider myprov {
	probe myprobe(int, char *);
};
