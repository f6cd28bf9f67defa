"""Writes small nsys-like SQLite exports with the exact tables and columns of the real H200 probe
export (nsys 2025.3.2, schema 3.20.3): tests check every profiling query against hand-computed
values on them, and benchmarks.analyze_1m_kernels scales one up. For tests and benchmarks only: no
product layer imports it (an import-linter contract in pyproject.toml).

Times are given in microseconds and stored as nanoseconds, like nsys.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

# Column lists copied from /work/shared/traces/nsys-h200-probe.sqlite (PRAGMA table_info), in order.
ACTIVITY = "start end deviceId contextId greenContextId streamId correlationId globalPid"
COLUMNS = {
    "META_DATA_EXPORT": "name value",
    "StringIds": "id value",
    "NVTX_EVENTS": "start end eventType rangeId category color text globalTid endGlobalTid textId "
    "domainId uint64Value int64Value doubleValue uint32Value int32Value floatValue jsonTextId "
    "jsonText binaryData",
    "CUPTI_ACTIVITY_KIND_KERNEL": f"{ACTIVITY} demangledName shortName mangledName launchType "
    "cacheConfig registersPerThread gridX gridY gridZ blockX blockY blockZ staticSharedMemory "
    "dynamicSharedMemory localMemoryPerThread localMemoryTotal gridId sharedMemoryExecuted "
    "graphNodeId sharedMemoryLimitConfig",
    "CUPTI_ACTIVITY_KIND_MEMCPY": f"{ACTIVITY} bytes copyKind deprecatedSrcId srcKind dstKind "
    "srcDeviceId srcContextId dstDeviceId dstContextId migrationCause graphNodeId virtualAddress "
    "copyCount",
    "CUPTI_ACTIVITY_KIND_MEMSET": f"{ACTIVITY} value bytes graphNodeId memKind",
    "CUPTI_ACTIVITY_KIND_RUNTIME": "start end eventClass globalTid correlationId nameId "
    "returnValue callchainId",
    # Not in the probe (nsys wrote no sync records there): columns as CUPTI documents them.
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": f"{ACTIVITY} syncType eventId",
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE": f"{ACTIVITY} graphId graphExecId",
    "TARGET_INFO_GPU": "vmId id name busLocation isDiscrete",
    "TARGET_INFO_SESSION_START_TIME": "utcEpochNs utcTime localTime",
    "TARGET_INFO_SYSTEM_ENV": "globalVid devStateName name nameEnum value",
    # OS runtime calls (nsys -t osrt); columns as the nsys export schema documents them.
    "OSRT_API": "start end eventClass globalTid nameId returnValue nestingLevel callchainId",
}

PID = 486 << 24 | 0x10000000000  # a globalPid shaped like the probe's (vm bits | pid << 24)
MAIN = PID | 486  # the engine thread's globalTid
COMPUTE, COPY = 7, 13  # stream ids
PAGEABLE, PINNED, DEVICE = 0, 1, 2  # memory kinds
HTOD, DTOH = 1, 2  # copy kinds


TEXT_COLUMNS = {
    "name",
    "value",
    "text",
    "jsonText",
    "binaryData",
    "utcTime",
    "localTime",
    "devStateName",
    "busLocation",
}


def _sql_type(column: str) -> str:
    return (
        "TEXT"
        if column in TEXT_COLUMNS
        else "REAL"
        if column in ("doubleValue", "floatValue")
        else "INTEGER"
    )


def us(t: float) -> int:
    return round(t * 1000)


def pid_of(tid: int) -> int:
    """globalPid of a globalTid: the thread bits cleared."""
    return tid - tid % 16777216


@dataclass
class TraceBuilder:
    domain: str = "bubblelab"
    schema_version: str = "3.20.3"
    rows: dict[str, list[dict]] = field(default_factory=lambda: {name: [] for name in COLUMNS})
    strings: dict[str, int] = field(default_factory=dict)
    next_correlation: int = 1000
    # Threads whose process creates our domain (one creation event each, as nsys records it per
    # process): a tensor-parallel trace has one per rank.
    domain_tids: tuple[int, ...] = (MAIN,)
    gpus: int = 1  # TARGET_INFO_GPU rows
    # how graph_launch records a replay, as nsys --cuda-graph-trace: "node" (a kernel per node) or
    # "graph" (one CUPTI_ACTIVITY_KIND_GRAPH_TRACE row over the nodes, no kernel)
    graph_trace: str = "node"

    def string(self, value: str) -> int:
        if value not in self.strings:
            self.strings[value] = len(self.strings) + 1
        return self.strings[value]

    def range(
        self,
        name: str,
        step: int | None,
        start: float,
        end: float,
        tid: int = MAIN,
        domain_id: int = 1,
        event_type: int = 59,
    ) -> None:
        """A push/pop range of our domain; names are registered strings, as engine.phases does.
        domain_id 0: the default domain (a framework's ranges); event_type 60: a start/end range."""
        self.rows["NVTX_EVENTS"].append(
            dict(
                start=us(start),
                end=us(end),
                eventType=event_type,
                globalTid=tid,
                textId=self.string(name),
                domainId=domain_id,
                int64Value=step,
            )
        )

    def mark(self, step: int, message: str, at: float, tid: int = MAIN) -> None:
        self.rows["NVTX_EVENTS"].append(
            dict(
                start=us(at), eventType=34, globalTid=tid, text=message, domainId=1, int64Value=step
            )
        )

    def call(self, name: str, start: float, end: float, tid: int = MAIN) -> int:
        self.next_correlation += 1
        self.rows["CUPTI_ACTIVITY_KIND_RUNTIME"].append(
            dict(
                start=us(start),
                end=us(end),
                eventClass=1,
                globalTid=tid,
                correlationId=self.next_correlation,
                nameId=self.string(name),
                returnValue=0,
            )
        )
        return self.next_correlation

    def kernel(
        self,
        name: str,
        at: float,
        start: float,
        end: float,
        stream: int = COMPUTE,
        graph_node: int | None = None,
        api: str = "cudaLaunchKernel_v7000",
        tid: int = MAIN,
        device: int = 0,
        correlation: int | None = None,
    ) -> int:
        """`api` (cudaLaunchKernel by default) at host time `at` (2 us long), running on the GPU
        over [start, end); with `correlation`, a node of the graph launch that made that call
        instead."""
        corr = correlation or self.call(api, at, at + 2, tid)
        self.rows["CUPTI_ACTIVITY_KIND_KERNEL"].append(
            dict(
                start=us(start),
                end=us(end),
                deviceId=device,
                contextId=1,
                streamId=stream,
                correlationId=corr,
                globalPid=pid_of(tid),
                demangledName=self.string(name + "<T>"),
                shortName=self.string(name),
                registersPerThread=32,
                gridX=1,
                gridY=1,
                gridZ=1,
                blockX=128,
                blockY=1,
                blockZ=1,
                staticSharedMemory=0,
                dynamicSharedMemory=0,
                localMemoryPerThread=0,
                localMemoryTotal=0,
                gridId=corr,
                graphNodeId=graph_node,
            )
        )
        return corr

    def graph_launch(
        self,
        at: float,
        nodes: list[tuple[float, float]],
        api: str = "cudaGraphLaunch_v10000",
        tid: int = MAIN,
        stream: int = COMPUTE,
        device: int = 0,
        host_us: float = 2,
        graph_id: int = 0,
    ) -> int:
        """One graph replay: a call at `at` (host_us long) and, traced by node, a kernel per node,
        each carrying the call's correlation id and a graph node id (CUPTI's: the graph's id in the
        high 32 bits); traced whole (graph_trace "graph"), one graph row from the first node's
        start to the last node's end."""
        corr = self.call(api, at, at + host_us, tid)
        if self.graph_trace == "graph":
            self._graph_row(nodes[0][0], nodes[-1][1], corr, tid, stream, device, graph_id)
            return corr
        for i, (start, end) in enumerate(nodes):
            self.kernel(
                f"node_{i % 7}",
                at,
                start,
                end,
                stream,
                (graph_id << 32) + 100 + i,
                tid=tid,
                device=device,
                correlation=corr,
            )
        return corr

    def os_call(
        self, name: str, start: float, end: float, tid: int = MAIN, nesting: int = 0
    ) -> None:
        """An OS runtime call (nsys -t osrt)."""
        self.rows["OSRT_API"].append(
            dict(
                start=us(start),
                end=us(end),
                eventClass=27,
                globalTid=tid,
                nameId=self.string(name),
                returnValue=0,
                nestingLevel=nesting,
                callchainId=0,
            )
        )

    def memcpy(
        self,
        at: float,
        start: float,
        end: float,
        copy_kind: int,
        host_kind: int = PINNED,
        stream: int = COPY,
        api: str = "cudaMemcpyAsync_v3020",
        nbytes: int = 64,
        tid: int = MAIN,
        device: int = 0,
        host_us: float = 2,
    ) -> int:
        """A copy made by `api` at host time `at` (host_us long: a synchronous copy blocks
        there)."""
        corr = self.call(api, at, at + host_us, tid)
        ends = {HTOD: (host_kind, DEVICE), DTOH: (DEVICE, host_kind)}
        src, dst = ends.get(copy_kind, (DEVICE, DEVICE))
        self.rows["CUPTI_ACTIVITY_KIND_MEMCPY"].append(
            dict(
                start=us(start),
                end=us(end),
                deviceId=device,
                contextId=1,
                streamId=stream,
                correlationId=corr,
                globalPid=pid_of(tid),
                bytes=nbytes,
                copyKind=copy_kind,
                srcKind=src,
                dstKind=dst,
            )
        )
        return corr

    def memset(
        self,
        at: float,
        start: float,
        end: float,
        stream: int = COMPUTE,
        api: str = "cudaMemsetAsync_v3020",
        tid: int = MAIN,
        device: int = 0,
    ) -> None:
        corr = self.call(api, at, at + 2, tid)
        self.rows["CUPTI_ACTIVITY_KIND_MEMSET"].append(
            dict(
                start=us(start),
                end=us(end),
                deviceId=device,
                contextId=1,
                streamId=stream,
                correlationId=corr,
                globalPid=pid_of(tid),
                value=0,
                bytes=64,
                memKind=DEVICE,
            )
        )

    def sync(
        self, name: str, start: float, end: float, sync_type: int | None, tid: int = MAIN
    ) -> None:
        """A blocking call plus its CUPTI synchronization record (syncType 1 event, 3 stream, 4
        context; None: no record, as nsys writes none on some set-ups)."""
        corr = self.call(name, start, end, tid)
        if sync_type is None:
            return
        self.rows["CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"].append(
            dict(
                start=us(start),
                end=us(end),
                deviceId=0,
                contextId=1,
                streamId=COPY,
                correlationId=corr,
                globalPid=pid_of(tid),
                syncType=sync_type,
                eventId=1,
            )
        )

    def graph_replay(
        self, at: float, start: float, end: float, graph_id: int = 1, tid: int = MAIN
    ) -> int:
        """A replay traced whole: a cudaGraphLaunch at `at` and one graph row over [start, end)."""
        corr = self.call("cudaGraphLaunch_v10000", at, at + 2, tid)
        self._graph_row(start, end, corr, tid, COMPUTE, 0, graph_id)
        return corr

    def _graph_row(
        self, start: float, end: float, corr: int, tid: int, stream: int, device: int, graph: int
    ) -> None:
        self.rows["CUPTI_ACTIVITY_KIND_GRAPH_TRACE"].append(
            dict(
                start=us(start),
                end=us(end),
                deviceId=device,
                contextId=1,
                streamId=stream,
                correlationId=corr,
                globalPid=pid_of(tid),
                graphId=graph,
                graphExecId=graph,
            )
        )

    def write(self, path: Path, omit: tuple[str, ...] = (), our_domain: bool = True) -> Path:
        """Write the export; tables with no rows are left out, as nsys creates tables lazily.
        our_domain=False: no creation event for our domain (a foreign trace)."""
        meta = {
            "EXPORT_PRODUCT_NAME": "NVIDIA Nsight Systems",
            "EXPORT_PRODUCT_VERSION": "2025.3.2.0",
            "EXPORT_SCHEMA_VERSION": self.schema_version,
        }
        self.rows["META_DATA_EXPORT"] = [dict(name=k, value=v) for k, v in meta.items()]
        domains = [
            dict(start=0, eventType=75, globalTid=tid, text=self.domain, domainId=1)
            for tid in self.domain_tids
        ]
        self.rows["NVTX_EVENTS"] = [
            *(domains if our_domain else []),
            *(e for e in self.rows["NVTX_EVENTS"] if e["eventType"] != 75),
        ]
        self.rows["StringIds"] = [dict(id=i, value=v) for v, i in self.strings.items()]
        self.rows["TARGET_INFO_GPU"] = [
            dict(vmId=0, id=i, name="Fake GPU", busLocation=str(i), isDiscrete=1)
            for i in range(self.gpus)
        ]
        self.rows["TARGET_INFO_SESSION_START_TIME"] = [
            dict(utcEpochNs=1_795_257_254_000_000_000, utcTime="2026-11-21T10:34:14", localTime="")
        ]
        self.rows["TARGET_INFO_SYSTEM_ENV"] = [
            dict(
                globalVid=0, devStateName="", name="NvDriverVersion", nameEnum=0, value="580.159.04"
            )
        ]
        db = sqlite3.connect(path)
        for table, columns in COLUMNS.items():
            rows = self.rows[table]
            if not rows or table in omit:
                continue
            names = columns.split()
            db.execute(
                f'CREATE TABLE "{table}" ({", ".join(f"{n} {_sql_type(n)}" for n in names)})'
            )
            db.executemany(
                f'INSERT INTO "{table}" VALUES ({", ".join("?" * len(names))})',
                [tuple(row.get(n) for n in names) for row in rows],
            )
        db.commit()
        db.close()
        return path
