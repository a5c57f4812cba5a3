/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * talb/map_decl.h - how every program of the project declares its maps
 * (talb/maps.h for the switch, talb/host_maps.h for the hosts).
 *
 * TALB_MAP(type, key, value, name, max_entries): a fresh map, or, when
 * compiled with -DTALB_PIN_DIR="\"/path\"", the map already pinned at
 * /path/<name>. The project's loader compiles once without it and binds a
 * reload to a node's pins by fd instead (datapath/compiled.py).
 */
#ifndef TALB_MAP_DECL_H
#define TALB_MAP_DECL_H

#ifdef TALB_PIN_DIR
#define TALB_MAP(_type, _key, _value, _name, _max) \
	BPF_TABLE_PINNED(_type, _key, _value, _name, _max, TALB_PIN_DIR "/" #_name)
#else
#define TALB_MAP(_type, _key, _value, _name, _max) \
	BPF_TABLE(_type, _key, _value, _name, _max)
#endif

#endif /* TALB_MAP_DECL_H */
