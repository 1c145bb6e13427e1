/* The provider of the DOF USDT proof (test/guest/usdt.sh). */
provider myprov {
	probe myprobe(int, char *);
};
