/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * talb/hash.h - seeded 5-tuple hash.
 *
 * MurmurHash3 x86_32 (Austin Appleby, public domain) over four 32-bit
 * words, in host byte order:
 *     w0 = saddr, w1 = daddr, w2 = sport << 16 | dport, w3 = protocol
 * i.e. murmur3_32(seed, 16 bytes of w0..w3 little-endian) on x86. Good
 * avalanche, cheap (no loops, no tables), independent of the kernel's
 * internal jhash. datapath/schemes/ecmp.py: flow_hash() is the reference in Python
 * (tests check the data path against it).
 */
#ifndef TALB_HASH_H
#define TALB_HASH_H

#define TALB_MM3_C1 0xcc9e2d51U
#define TALB_MM3_C2 0x1b873593U

static __always_inline __u32 talb_rotl32(__u32 x, int r)
{
	return (x << r) | (x >> (32 - r));
}

static __always_inline __u32 talb_mm3_mix(__u32 h, __u32 k)
{
	k *= TALB_MM3_C1;
	k = talb_rotl32(k, 15);
	k *= TALB_MM3_C2;
	h ^= k;
	h = talb_rotl32(h, 13);
	return h * 5 + 0xe6546b64U;
}

static __always_inline __u32 talb_fmix32(__u32 h)
{
	h ^= h >> 16;
	h *= 0x85ebca6bU;
	h ^= h >> 13;
	h *= 0xc2b2ae35U;
	h ^= h >> 16;
	return h;
}

/* Addresses and ports in host byte order. */
static __always_inline __u32 talb_hash_5tuple(__u32 saddr, __u32 daddr,
					      __u16 sport, __u16 dport,
					      __u8 proto, __u32 seed)
{
	__u32 h = seed;

	h = talb_mm3_mix(h, saddr);
	h = talb_mm3_mix(h, daddr);
	h = talb_mm3_mix(h, ((__u32)sport << 16) | dport);
	h = talb_mm3_mix(h, proto);
	h ^= 16;                /* length in bytes */
	return talb_fmix32(h);
}

#endif /* TALB_HASH_H */
