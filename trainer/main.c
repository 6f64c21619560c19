/* trainer/main.c - larch-train (being written) */
#include <stdio.h>
#ifndef LARCH_TRAIN_NO_MAIN
int main(void)
{
	puts("larch-train: under construction");
	return 1;
}
#endif
