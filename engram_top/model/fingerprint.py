"""A run's fingerprint: what it ran as, on what, so that "it got slower since last night" can
be answered with what changed (a flag, a version, a driver) before anyone looks at the load.
Kept on the run's facts (so every recording session and snapshot carries it) and compared
by `engram-top diff`.

Pure: the session hands in the readings (engram_top.live.session)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields

from collectors.readings import GpuData, HostData, ServerData
from collectors.units import gib
from engram_top.model.redact import redact_text

# Server arguments that change from run to run without changing what ran: left out so a
# diff shows only what matters.
VOLATILE_ARGS = frozenset({"port", "host", "random_seed", "api_key", "log_requests",
                           "file_storage_path", "base_gpu_id", "nccl_port", "dist_init_addr",
                           "served_model_name", "tokenizer_path", "download_dir"})
RAW_CAP = 400  # server arguments kept: a dump of a few hundred keys, never without bound


@dataclass(frozen=True, slots=True)
class Fingerprint:
    engine: str = ""  # "sglang 0.5.18": the engine and its version where the server says
    model: str = ""
    placement: str = ""
    parallel: dict[str, int] = field(default_factory=dict)  # tp_size, dp_size, pp_size, ep_size
    # The sizes of ``parallel`` that are lower bounds: derived from the highest rank a log
    # showed, not stated (shown "TP≥7", never as the size).
    parallel_at_least: tuple[str, ...] = ()
    server_args: dict[str, str] = field(default_factory=dict)  # as printed (secrets redacted)
    switches: dict[str, str] = field(default_factory=dict)  # the engine's env variables
    engram: str = ""  # the placement as the engine reads it, its layout and prefetch
    hicache_host_bytes: int | None = None  # HiCache's resolved host pool, every rank
    gpus: str = ""  # "4x NVIDIA B200, 179.1 GiB"
    driver: str = ""
    host_total_bytes: int | None = None
    numa_nodes: int | None = None
    thp: str = ""  # transparent huge pages: always, madvise, never


@dataclass(frozen=True, slots=True)
class Change:
    what: str
    before: str
    after: str


def fingerprint(*, engine: str, model: str | None, placement: str,
                parallel: Mapping[str, int], parallel_at_least: tuple[str, ...] = (),
                raw_args: Mapping[str, object],
                switches: Mapping[str, str], engram: str, hicache_host_bytes: int | None,
                server: ServerData | None, gpu: GpuData | None, host: HostData | None,
                thp: str) -> Fingerprint:
    version = server.version if server is not None and server.version else ""
    args = {str(k): redact_text(str(v))[:200] for k, v in list(raw_args.items())[:RAW_CAP]
            if str(k) not in VOLATILE_ARGS}
    gpus = driver = ""
    if gpu is not None and gpu.devices:
        names = sorted({d.name for d in gpu.devices})
        gpus = (f"{len(gpu.devices)}x {' + '.join(names)}, "
                f"{gib(gpu.devices[0].total_bytes)} GiB")
        driver = gpu.driver_version
    return Fingerprint(
        engine=f"{engine} {version}".strip(), model=model or "", placement=placement,
        parallel=dict(parallel), parallel_at_least=tuple(sorted(
            k for k in parallel_at_least if k in parallel)), server_args=args,
        switches={k: redact_text(v) for k, v in sorted(switches.items())}, engram=engram,
        hicache_host_bytes=hicache_host_bytes, gpus=gpus, driver=driver,
        host_total_bytes=host.total_bytes if host is not None else None,
        numa_nodes=len(host.numa_nodes) or None if host is not None else None, thp=thp)


def _shown(value: object, name: str = "") -> str:
    if value is None or value == "":
        return "n/a"
    if isinstance(value, int) and name.endswith("_bytes"):
        return f"{gib(value, 2)} GiB"
    return str(value)


def parallel_size(fp: Fingerprint, key: str) -> str:
    """One parallel size as shown: "7", or "≥7" where it is a lower bound; "n/a"."""
    value = fp.parallel.get(key)
    if value is None:
        return "n/a"
    return f"≥{value}" if key in fp.parallel_at_least else str(value)


def changes(a: Fingerprint, b: Fingerprint) -> list[Change]:
    """What differs, field by field; a dict field key by key (an argument added, removed or
    changed is a change of its own). A parallel size that is a lower bound on one side reads
    "≥N" (a size read exactly against a bound is a change even where the figures agree)."""
    out: list[Change] = []
    for f in fields(Fingerprint):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if f.name == "parallel_at_least":
            continue  # shown with the sizes
        if f.name == "parallel":
            for key in sorted(set(x) | set(y)):
                before, after = parallel_size(a, key), parallel_size(b, key)
                if before != after:
                    out.append(Change(f"parallel.{key}", before, after))
        elif isinstance(x, dict) and isinstance(y, dict):
            for key in sorted(set(x) | set(y)):
                if x.get(key) != y.get(key):
                    out.append(Change(f"{f.name}.{key}", _shown(x.get(key)), _shown(y.get(key))))
        elif x != y:
            out.append(Change(f.name, _shown(x, f.name), _shown(y, f.name)))
    return out


def fingerprint_lines(fp: Fingerprint) -> list[str]:
    """A fingerprint as Markdown list lines (summary.md)."""
    par = ", ".join(f"{k.removesuffix('_size').upper()}{parallel_size(fp, k)}"
                    for k in fp.parallel)
    return [f"- {fp.engine or 'engine n/a'} · model {_shown(fp.model)} · placement "
            f"{_shown(fp.placement)} · {par or 'parallel n/a'}",
            f"- Engram: {_shown(fp.engram)}; HiCache host pool "
            f"{_shown(fp.hicache_host_bytes, 'hicache_host_bytes')}",
            f"- {_shown(fp.gpus)}, driver {_shown(fp.driver)}; host "
            f"{_shown(fp.host_total_bytes, 'host_total_bytes')}, {_shown(fp.numa_nodes)} NUMA "
            f"node(s), "
            f"transparent huge pages {_shown(fp.thp)}",
            f"- {len(fp.server_args)} server arguments, {len(fp.switches)} engine switches "
            f"in the environment (snapshot.json has them)"]
