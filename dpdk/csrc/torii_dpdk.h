/*
 * The DPDK 22.11 API that torii-dpdk binds (bindgen reads this header), plus the C shim
 * (csrc/torii_dpdk_shim.c) for what bindgen cannot reach: thread-local `per_lcore_*`
 * variables such as `rte_errno`.
 */
#ifndef TORII_DPDK_H
#define TORII_DPDK_H

#include <errno.h>

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_version.h>
#include <rte_mempool.h>
#include <rte_mbuf.h>
#include <rte_ethdev.h>
#include <rte_thash.h>

/*
 * DPDK's flag macros expand to RTE_BIT64(n), a function-like macro bindgen cannot
 * evaluate; these constants carry their values to Rust (bindgen evaluates const
 * initialisers). Same names with TORII_ for RTE_.
 */
static const uint64_t TORII_ETH_RSS_IPV4 = RTE_ETH_RSS_IPV4;
static const uint64_t TORII_ETH_RSS_FRAG_IPV4 = RTE_ETH_RSS_FRAG_IPV4;
static const uint64_t TORII_ETH_RSS_NONFRAG_IPV4_TCP = RTE_ETH_RSS_NONFRAG_IPV4_TCP;
static const uint64_t TORII_ETH_RSS_NONFRAG_IPV4_UDP = RTE_ETH_RSS_NONFRAG_IPV4_UDP;
static const uint64_t TORII_ETH_RSS_NONFRAG_IPV4_SCTP = RTE_ETH_RSS_NONFRAG_IPV4_SCTP;
static const uint64_t TORII_ETH_RSS_NONFRAG_IPV4_OTHER = RTE_ETH_RSS_NONFRAG_IPV4_OTHER;
static const uint64_t TORII_ETH_RSS_IPV6 = RTE_ETH_RSS_IPV6;
static const uint64_t TORII_ETH_RSS_FRAG_IPV6 = RTE_ETH_RSS_FRAG_IPV6;
static const uint64_t TORII_ETH_RSS_NONFRAG_IPV6_TCP = RTE_ETH_RSS_NONFRAG_IPV6_TCP;
static const uint64_t TORII_ETH_RSS_NONFRAG_IPV6_UDP = RTE_ETH_RSS_NONFRAG_IPV6_UDP;
static const uint64_t TORII_ETH_RSS_NONFRAG_IPV6_SCTP = RTE_ETH_RSS_NONFRAG_IPV6_SCTP;
static const uint64_t TORII_ETH_RSS_NONFRAG_IPV6_OTHER = RTE_ETH_RSS_NONFRAG_IPV6_OTHER;
static const uint64_t TORII_ETH_RSS_IP = RTE_ETH_RSS_IP;
static const uint64_t TORII_ETH_RSS_TCP = RTE_ETH_RSS_TCP;
static const uint64_t TORII_ETH_RSS_UDP = RTE_ETH_RSS_UDP;
static const uint64_t TORII_ETH_RSS_SCTP = RTE_ETH_RSS_SCTP;
static const uint64_t TORII_ETH_RX_OFFLOAD_VLAN_STRIP = RTE_ETH_RX_OFFLOAD_VLAN_STRIP;
static const uint64_t TORII_ETH_RX_OFFLOAD_IPV4_CKSUM = RTE_ETH_RX_OFFLOAD_IPV4_CKSUM;
static const uint64_t TORII_ETH_RX_OFFLOAD_UDP_CKSUM = RTE_ETH_RX_OFFLOAD_UDP_CKSUM;
static const uint64_t TORII_ETH_RX_OFFLOAD_TCP_CKSUM = RTE_ETH_RX_OFFLOAD_TCP_CKSUM;
static const uint64_t TORII_ETH_RX_OFFLOAD_SCTP_CKSUM = RTE_ETH_RX_OFFLOAD_SCTP_CKSUM;
static const uint64_t TORII_ETH_RX_OFFLOAD_CHECKSUM = RTE_ETH_RX_OFFLOAD_CHECKSUM;
static const uint64_t TORII_ETH_RX_OFFLOAD_SCATTER = RTE_ETH_RX_OFFLOAD_SCATTER;
static const uint64_t TORII_ETH_RX_OFFLOAD_RSS_HASH = RTE_ETH_RX_OFFLOAD_RSS_HASH;
static const uint64_t TORII_ETH_TX_OFFLOAD_VLAN_INSERT = RTE_ETH_TX_OFFLOAD_VLAN_INSERT;
static const uint64_t TORII_ETH_TX_OFFLOAD_IPV4_CKSUM = RTE_ETH_TX_OFFLOAD_IPV4_CKSUM;
static const uint64_t TORII_ETH_TX_OFFLOAD_UDP_CKSUM = RTE_ETH_TX_OFFLOAD_UDP_CKSUM;
static const uint64_t TORII_ETH_TX_OFFLOAD_TCP_CKSUM = RTE_ETH_TX_OFFLOAD_TCP_CKSUM;
static const uint64_t TORII_ETH_TX_OFFLOAD_SCTP_CKSUM = RTE_ETH_TX_OFFLOAD_SCTP_CKSUM;
static const uint64_t TORII_ETH_TX_OFFLOAD_MULTI_SEGS = RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
static const uint64_t TORII_ETH_TX_OFFLOAD_MBUF_FAST_FREE = RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE;

static const uint32_t TORII_MEMPOOL_NAMESIZE = RTE_MEMPOOL_NAMESIZE;

/* The calling thread's rte_errno (a thread-local variable of librte_eal). */
int torii_rte_errno(void);

/* Sets the calling thread's rte_errno (tests use it to check the getter). */
void torii_set_rte_errno(int value);

#endif
