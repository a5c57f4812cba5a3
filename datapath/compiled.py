"""Compile a program of bpf/ once, load it on many nodes.

bcc compiles a source (clang, ~1.5 s for the switch) and creates its maps;
the instructions it emits refer to those maps by fd (``ld_imm64`` with
src_reg BPF_PSEUDO_MAP_FD, the fd in imm). :func:`compile_object` keeps
what a load needs and nothing of the process that compiled it:

* each program's instructions (``BPF.dump_func``),
* each map's definition (type, key and value size, entries, flags), and
* the relocation table: which instruction refers to which map, by name.

:class:`NodeObject` then loads one node's instance: fresh maps of the same
definitions (or the node's pinned ones), every reference rewritten to them,
each program verified by ``BPF_PROG_LOAD`` (datapath/bpf_syscall.py).
Nodes share no state: one compile, per-node maps.

:func:`get` adds two caches in front of the compile: this process's (one
compile per build, also for nodes loaded by forked workers) and a directory
(:func:`cache_dir`) keyed by the expanded source, the cflags, the kernel
release and bcc's version, so that a later build skips clang altogether. A
cache file that cannot be read, or that another user owns or others may
write (its code goes into the kernel), is ignored with a warning and
written anew.
"""
from __future__ import annotations

import base64
import errno
import hashlib
import json
import os
import platform
import struct
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from common import bcc_bindings, paths
from datapath import bpf_syscall as sc
from datapath.source import INCLUDE_DIR, expand_source

__all__ = ["MapDef", "CompiledObject", "NodeObject", "compile_object", "get", "cache_dir",
           "cache_key", "stats", "reset_memo", "CacheWarning", "FORMAT"]

#: version of the cache file's layout: part of the key
FORMAT = 1
BPF_PSEUDO_MAP_FD = 1
_LD_IMM64 = 0x18  # BPF_LD | BPF_IMM | BPF_DW
_INSN = struct.Struct("<BBhi")


class CacheWarning(UserWarning):
    """A cache file of compiled programs was unusable (it is rebuilt)."""


@dataclass(frozen=True)
class MapDef:
    """One map as the program declares it (``BPF_MAP_CREATE``'s arguments)."""

    name: str
    type: int
    key_size: int
    value_size: int
    max_entries: int
    flags: int = 0

    def create(self) -> int:
        return sc.map_create(self.type, self.key_size, self.value_size, self.max_entries,
                             name=self.name, flags=self.flags)

    def mismatch(self, info: "sc.MapInfo") -> str | None:
        """How an existing map (a pin) differs from this definition, or None."""
        want = (self.type, self.key_size, self.value_size, self.max_entries)
        got = (info.type, info.key_size, info.value_size, info.max_entries)
        if want == got:
            return None
        return (f"(type, key, value, entries) {got} where the program declares {want}")


@dataclass(frozen=True)
class CompiledObject:
    """What one bcc compile yields: the programs' instructions with map
    references as placeholders, the maps' definitions and the relocations
    (program -> [(instruction index, map name)])."""

    source: str
    key: str
    license: str
    maps: dict[str, MapDef]
    insns: dict[str, bytes]
    relocs: dict[str, tuple[tuple[int, str], ...]]
    compile_seconds: float = 0.0
    origin: str = field(default="compiled", compare=False)   # compiled / cache / memory

    def to_json(self) -> str:
        return json.dumps({
            "format": FORMAT, "source": self.source, "key": self.key, "license": self.license,
            "compile_seconds": self.compile_seconds,
            "maps": [vars(m) for m in self.maps.values()],
            "programs": {n: {"insns": base64.b64encode(b).decode(),
                             "relocs": [list(r) for r in self.relocs[n]]}
                         for n, b in self.insns.items()},
        })

    @classmethod
    def from_json(cls, text: str, key: str) -> "CompiledObject":
        """Parse and check a cache file; ValueError says what is wrong."""
        try:
            d = json.loads(text)
            if d.get("format") != FORMAT or d.get("key") != key:
                raise ValueError(f"format {d.get('format')}, key {d.get('key')!r}: not this build's")
            maps = {m["name"]: MapDef(**m) for m in d["maps"]}
            insns, relocs = {}, {}
            for name, p in d["programs"].items():
                insns[name] = base64.b64decode(p["insns"], validate=True)
                relocs[name] = tuple((int(i), str(m)) for i, m in p["relocs"])
            obj = cls(source=d["source"], key=key, license=d["license"], maps=maps,
                      insns=insns, relocs=relocs,
                      compile_seconds=float(d.get("compile_seconds", 0.0)), origin="cache")
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"unreadable: {exc}") from None
        obj.check()
        return obj

    def check(self) -> None:
        """Every relocation points at an ld_imm64 of a known map."""
        for name, code in self.insns.items():
            if not code or len(code) % 8:
                raise ValueError(f"{name}: {len(code)} bytes of instructions")
            n = len(code) // 8
            for index, map_name in self.relocs[name]:
                if not 0 <= index < n - 1 or map_name not in self.maps:
                    raise ValueError(f"{name}: relocation ({index}, {map_name!r}) out of range")
                op, regs, _off, _imm = _INSN.unpack_from(code, index * 8)
                if op != _LD_IMM64 or regs >> 4 != BPF_PSEUDO_MAP_FD:
                    raise ValueError(f"{name}: relocation at {index} is no map load")

    def linked(self, prog: str, map_fds: dict[str, int]) -> bytes:
        """``prog``'s instructions with every map reference set to ``map_fds``."""
        code = bytearray(self.insns[prog])
        for index, map_name in self.relocs[prog]:
            op, regs, off, _imm = _INSN.unpack_from(code, index * 8)
            _INSN.pack_into(code, index * 8, op, regs, off, map_fds[map_name])
        return bytes(code)


# --- compile -------------------------------------------------------------------
def _relocations(code: bytes, fd_names: dict[int, str], prog: str) -> tuple[tuple[int, str], ...]:
    out = []
    n = len(code) // 8
    i = 0
    while i < n:
        op, regs, _off, imm = _INSN.unpack_from(code, i * 8)
        if op == _LD_IMM64:
            src = regs >> 4
            if src == BPF_PSEUDO_MAP_FD:
                if imm not in fd_names:
                    raise RuntimeError(f"{prog}: instruction {i} refers to fd {imm}, "
                                       "not a map of this compile")
                out.append((i, fd_names[imm]))
            elif src != 0:
                raise RuntimeError(f"{prog}: instruction {i}: ld_imm64 with src_reg {src} "
                                   "(only map fds are relocated)")
            i += 2
            continue
        i += 1
    return tuple(out)


def _bcc_maps(bpf) -> dict[int, str]:
    """{fd: name} of every map the bcc module created."""
    import ctypes

    lib = bcc_bindings.import_bcc().libbcc.lib
    lib.bpf_num_tables.restype = ctypes.c_size_t
    lib.bpf_num_tables.argtypes = [ctypes.c_void_p]
    lib.bpf_table_name.restype = ctypes.c_char_p
    lib.bpf_table_name.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    lib.bpf_table_fd_id.restype = ctypes.c_int
    lib.bpf_table_fd_id.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    out = {}
    for i in range(lib.bpf_num_tables(bpf.module)):
        fd = lib.bpf_table_fd_id(bpf.module, i)
        if fd >= 0:
            out[fd] = lib.bpf_table_name(bpf.module, i).decode()
    return out


def compile_object(source: str | os.PathLike, programs: tuple[str, ...],
                   cflags: tuple[str, ...] = (), *, text: str | None = None,
                   key: str = "") -> CompiledObject:
    """Compile ``source`` (its expanded ``text``) with bcc and keep
    ``programs``' instructions, the maps and the relocations. Nothing is
    verified here; the compile's own maps are closed before returning."""
    import time

    bcc = bcc_bindings.import_bcc()
    if text is None:
        text = expand_source(source)
    started = time.monotonic()
    bpf = bcc.BPF(text=text.encode(), cflags=[f"-I{INCLUDE_DIR}", *cflags])
    try:
        fd_names = _bcc_maps(bpf)
        maps = {}
        for fd, name in fd_names.items():
            info = sc.map_info(fd)
            maps[name] = MapDef(name, info.type, info.key_size, info.value_size,
                                info.max_entries, info.map_flags)
        insns, relocs = {}, {}
        for prog in programs:
            code = bytes(bpf.dump_func(prog.encode()))
            insns[prog] = code
            relocs[prog] = _relocations(code, fd_names, prog)
        license = (bcc.libbcc.lib.bpf_module_license(bpf.module) or b"GPL").decode()
    finally:
        bpf.cleanup()
    obj = CompiledObject(source=str(source), key=key, license=license, maps=maps, insns=insns,
                         relocs=relocs, compile_seconds=round(time.monotonic() - started, 3))
    obj.check()
    return obj


# --- caches ----------------------------------------------------------------------
def cache_dir() -> Path | None:
    """Where compiled programs are kept across builds: ``$TALB_BPF_CACHE``,
    else <run dir>/bpf-cache (tmpfs: it goes with a reboot, as may the
    kernel it was verified for). ``TALB_BPF_CACHE=off``: no cache on disk."""
    env = os.environ.get("TALB_BPF_CACHE")
    if env is not None and env.strip().lower() in ("", "0", "off", "no", "none"):
        return None
    return Path(env) if env else paths.RUN_DIR / "bpf-cache"


def cache_key(text: str, programs: tuple[str, ...], cflags: tuple[str, ...]) -> str:
    """Hash of everything the compiled result depends on: the expanded
    source, the programs kept, the cflags, the kernel release (bcc compiles
    against its headers) and bcc's version."""
    h = hashlib.sha256()
    for part in (f"talb-bpf-cache {FORMAT}", text, "\0".join(programs), "\0".join(cflags),
                 platform.release(), bcc_bindings.version()):
        h.update(part.encode())
        h.update(b"\0\1")
    return h.hexdigest()


_memo: dict[str, CompiledObject] = {}
_lock = threading.Lock()
_stats = {"compiles": 0, "cache_hits": 0, "memory_hits": 0, "compile_seconds": 0.0}


def stats() -> dict:
    """This process's counts: bcc compiles, disk cache hits, in-memory hits
    and the seconds spent compiling."""
    return dict(_stats)


def reset_memo() -> None:
    """Forget the in-process results (the next :func:`get` reads the disk cache)."""
    with _lock:
        _memo.clear()


def _read_cache(path: Path, key: str) -> CompiledObject | None:
    try:
        st = path.stat()
        if st.st_uid != os.geteuid() or st.st_mode & 0o022:
            # what is loaded into the kernel comes from here: only our own files
            warnings.warn(f"{path}: not this user's, or writable by others; ignored, "
                          "compiling again", CacheWarning, stacklevel=3)
            return None
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        warnings.warn(f"{path}: {exc}; compiling again", CacheWarning, stacklevel=3)
        return None
    try:
        return CompiledObject.from_json(text, key)
    except ValueError as exc:
        warnings.warn(f"{path}: {exc}; ignored, compiling again", CacheWarning, stacklevel=3)
        return None


def _write_cache(path: Path, obj: CompiledObject) -> None:
    try:
        if path.parent == paths.RUN_DIR or paths.RUN_DIR in path.parent.parents:
            paths.private_dir(path.parent)
        else:    # a directory of the user's (TALB_BPF_CACHE): made if missing, never chmod'ed
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        paths.write_private(path, obj.to_json())
    except OSError as exc:
        warnings.warn(f"{path}: not written ({exc}); the next build compiles again",
                      CacheWarning, stacklevel=3)


def get(source: str | os.PathLike, programs: tuple[str, ...],
        cflags: tuple[str, ...] = ()) -> CompiledObject:
    """``source`` compiled with ``cflags``: from this process's memory, the
    cache directory, or bcc (then remembered in both)."""
    text = expand_source(source)
    programs, cflags = tuple(programs), tuple(cflags)
    key = cache_key(text, programs, cflags)
    with _lock:
        if key in _memo:
            _stats["memory_hits"] += 1
            return _memo[key]
        where = cache_dir()
        path = where / f"{Path(source).stem}-{key[:32]}.json" if where else None
        obj = _read_cache(path, key) if path else None
        if obj is not None:
            _stats["cache_hits"] += 1
        else:
            obj = compile_object(source, programs, cflags, text=text, key=key)
            _stats["compiles"] += 1
            _stats["compile_seconds"] += obj.compile_seconds
            if path:
                _write_cache(path, obj)
        _memo[key] = obj
        return obj


# --- one node's instance -----------------------------------------------------------
class NodeObject:
    """One node's maps and programs, from a :class:`CompiledObject`.

    ``map_fds``: maps to use instead of fresh ones (a node's pins; the fds
    are dup'ed, the caller keeps its own); every other map is created here. Each
    program is loaded as ``prog_type``. :meth:`close` drops this process's
    fds (attached filters keep the programs, pins the maps)."""

    def __init__(self, obj: CompiledObject, *, map_fds: dict[str, int] | None = None,
                 prog_type: int = sc.BPF_PROG_TYPE_SCHED_CLS):
        self.obj = obj
        self.map_fds: dict[str, int] = {}
        self.prog_fds: dict[str, int] = {}
        self.fresh: tuple[str, ...] = ()
        self._own: list[int] = []
        given = dict(map_fds or {})
        try:
            for name, mdef in obj.maps.items():
                if name in given:
                    bad = mdef.mismatch(sc.map_info(given[name]))
                    if bad:
                        raise OSError(errno.EINVAL, f"map {name!r}: {bad}")
                    fd = os.dup(given[name])
                else:
                    fd = mdef.create()
                    self.fresh += (name,)
                self._own.append(fd)
                self.map_fds[name] = fd
            for prog in obj.insns:
                fd = sc.prog_load(obj.linked(prog, self.map_fds), prog_type=prog_type,
                                  license=obj.license, name=prog)
                self._own.append(fd)
                self.prog_fds[prog] = fd
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        for fd in self._own:
            try:
                os.close(fd)
            except OSError:
                pass
        self._own = []
        self.map_fds = {}
        self.prog_fds = {}
