/*
 * Getters for DPDK's thread-local variables. `per_lcore__rte_errno` is a `__thread`
 * variable exported by librte_eal; Rust cannot name a foreign thread-local portably, so
 * it is read here, in C, with the same TLS model the headers declare.
 */
#include "torii_dpdk.h"

int torii_rte_errno(void)
{
	return rte_errno;
}

void torii_set_rte_errno(int value)
{
	rte_errno = value;
}
