"""GPU identity and model: which GPU (a physical board, or a MIG instance of one) each process's
CUDA device is, what model it is and how many SMs it has (docs/definitions.md#gpus-and-mig-instances).

What the export gives, by Nsight Systems version (tables and columns as in real exports):

* ``TARGET_INFO_GPU``: the GPUs of the machine. 2021.2 and later: ``id``, ``name``, ``uuid``
  (without the ``GPU-`` prefix; ``MIG-...`` where a MIG instance is listed itself),
  ``busLocation``, ``smCount`` and ``cuDevice`` (the CUDA ordinal). 2020.3-2021.1: only
  ``deviceId`` (the CUDA ordinal), ``name``, ``busLocation``. Placeholders mean "unknown": an
  all-zero uuid, ``smCount`` 0 on adapters that are not CUDA GPUs (a laptop's integrated
  graphics), an empty ``cuDevice``.
* ``TARGET_INFO_CUDA_DEVICE`` (2022 and later): per process (``pid``) and CUDA ordinal
  (``cudaId``) the GPU (``gpuId`` -> ``TARGET_INFO_GPU.id``, nullable), the device's ``uuid``
  (``MIG-...`` on a MIG instance) and ``numMultiprocessors`` (the SMs the process sees: a MIG
  instance's own). Columns may be missing.
* ``TARGET_INFO_CUDA_GPU`` (2020.3-2021): per process (``pid``) and CUDA ordinal (``deviceId``)
  the device's ``name``, ``pciBusId`` (``<UNKNOWN_BUS_ID>`` when unknown) and ``numMultiprocessors``.

A MIG instance (a ``MIG-`` uuid in either table) is its own GPU, keyed by that uuid, never
unioned with another instance of its board; its SMs and its board's SMs price it
(:func:`pipeline.analysis.cost.find_rate`). Processes that see fewer SMs than their board
without any MIG uuid cannot be told apart; their row says so (:func:`sm_subset_warning`).
When no table maps a process's device to a listed GPU, the model is still known when every
GPU the export lists is one model, or when the device's CUDA ordinal names exactly one of
them; otherwise it is blank and ``model_note`` says why.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..model import NO_GPU_NAMED, RowWarning, WarningCode
from .sqlite import text_rows
from .tables import CUDA_DEVICE_TABLE, CUDA_GPU_TABLE, GPU_TABLE, Schema

#: Columns of :attr:`pipeline.model.Report.devices`.
DEVICE_COLUMNS = ["pid", "device_id", "gpu_key", "gpu_model", "uuid", "bus", "mig", "sms", "board_sms", "model_note"]


@dataclass(frozen=True)
class ListedGpu:
    """One TARGET_INFO_GPU row: ``ref`` (``id``, or ``deviceId`` in 2020.3-2021.1), ``name``,
    ``uuid`` and ``bus`` ("" when unknown), ``sms`` (None when unknown; 0 on adapters that are
    not CUDA GPUs), ``ordinal`` (the CUDA ordinal, None when unknown)."""

    ref: int
    name: str
    uuid: str
    bus: str
    sms: int | None
    ordinal: int | None

    @property
    def cuda(self) -> bool:
        """False for an adapter the export lists with 0 SMs (integrated graphics, a render driver)."""
        return self.sms != 0


@dataclass(frozen=True)
class CudaDevice:
    """One process's CUDA device as TARGET_INFO_CUDA_DEVICE or TARGET_INFO_CUDA_GPU maps it:
    ``gpu_id`` (a TARGET_INFO_GPU ``id``, or None), ``uuid``, ``sms`` (None when unknown),
    ``name`` and ``bus`` (TARGET_INFO_CUDA_GPU only; "" otherwise)."""

    gpu_id: int | None
    uuid: str
    sms: int | None
    name: str = ""
    bus: str = ""


def clean_uuid(value) -> str:
    """A uuid as the export gives it, or "" for none (NULL, blank, the all-zero placeholder)."""
    text = str(value or "").strip()
    bare = text[4:] if text[:4].upper() in ("GPU-", "MIG-") else text
    return text if bare.strip("0-") else ""


def clean_bus(value) -> str:
    """A PCI bus id, or "" for none (NULL, blank, ``<UNKNOWN_BUS_ID>``)."""
    text = str(value or "").strip()
    return "" if text.startswith("<") else text


def is_mig(uuid: str) -> bool:
    """True for a MIG instance's uuid (``MIG-...``)."""
    return uuid[:4].upper() == "MIG-"


def board_name(name) -> str:
    """The board's model from a device name: ``NVIDIA A100-SXM4-80GB MIG 1g.10gb`` -> ``NVIDIA A100-SXM4-80GB``."""
    text = str(name or "").strip()
    cut = text.upper().find(" MIG ")
    return text[:cut].strip() if cut > 0 else text


def _count(value) -> int | None:
    return None if value is None else int(value)


def _column(cols: dict, *names: str) -> str:
    """The first of ``names`` the table has, else ``NULL`` (a column this version does not have)."""
    return next((n for n in names if n in cols), "NULL")


def _integers(*columns) -> dict[int, str]:
    """Result position -> export column of a device query's ids and SM counts, for
    :func:`~pipeline.load.sqlite.text_rows` to check hold integers (None: a text column; ``NULL``: a
    column this version lacks, always NULL)."""
    return {i: c for i, c in enumerate(columns) if c not in (None, "NULL")}


def listed_gpus(schema: Schema) -> list[ListedGpu]:
    """The GPUs TARGET_INFO_GPU lists (either layout, see the module docstring); [] without it."""
    cols = schema.columns(GPU_TABLE)
    ref = _column(cols, "id", "deviceId")
    if ref == "NULL":
        return []
    # The CUDA ordinal: cuDevice; in the 2020.3-2021.1 layout deviceId is the ordinal itself.
    ordinal = _column(cols, "cuDevice") if ref == "id" else ref
    sql = (f"SELECT {ref}, {_column(cols, 'name')}, {_column(cols, 'uuid')}, {_column(cols, 'busLocation')}, "
           f"{_column(cols, 'smCount')}, {ordinal} FROM {GPU_TABLE}")
    rows = text_rows(schema.con, sql, GPU_TABLE, _integers(ref, None, None, None, "smCount", ordinal))
    return [ListedGpu(int(r), str(name or "").strip(), clean_uuid(uuid), clean_bus(bus), _count(sms), _count(o))
            for r, name, uuid, bus, sms, o in rows if r is not None]


def cuda_devices(schema: Schema) -> dict[tuple[int, int], CudaDevice]:
    """(pid, CUDA ordinal) -> :class:`CudaDevice`, from TARGET_INFO_CUDA_DEVICE (2022 and later)
    and TARGET_INFO_CUDA_GPU (2020.3-2021); the first wins where both have a row. A NULL pid
    is stored as -1 (any process)."""
    out: dict[tuple[int, int], CudaDevice] = {}
    cols = schema.columns(CUDA_DEVICE_TABLE)
    if {"cudaId", "pid"} <= set(cols):
        sql = (f"SELECT pid, cudaId, {_column(cols, 'gpuId')}, {_column(cols, 'uuid')}, "
               f"{_column(cols, 'numMultiprocessors')} FROM {CUDA_DEVICE_TABLE}")
        rows = text_rows(schema.con, sql, CUDA_DEVICE_TABLE,
                         _integers("pid", "cudaId", _column(cols, "gpuId"), None, _column(cols, "numMultiprocessors")))
        for pid, dev, gpu_id, uuid, sms in rows:
            if dev is not None:
                key = (-1 if pid is None else int(pid), int(dev))
                out[key] = CudaDevice(_count(gpu_id), clean_uuid(uuid), _count(sms))
    cols = schema.columns(CUDA_GPU_TABLE)
    if {"deviceId", "pid"} <= set(cols):
        sql = (f"SELECT pid, deviceId, {_column(cols, 'name')}, {_column(cols, 'pciBusId')}, "
               f"{_column(cols, 'numMultiprocessors')}, {_column(cols, 'uuid')} FROM {CUDA_GPU_TABLE}")
        rows = text_rows(schema.con, sql, CUDA_GPU_TABLE,
                         _integers("pid", "deviceId", None, None, _column(cols, "numMultiprocessors")))
        for pid, dev, name, bus, sms, uuid in rows:
            if dev is not None:
                key = (-1 if pid is None else int(pid), int(dev))
                out.setdefault(key, CudaDevice(None, clean_uuid(uuid), _count(sms), str(name or "").strip(),
                                               clean_bus(bus)))
    return out


def _only(items):
    """The one item of ``items``, else None (none, or more than one)."""
    items = list(items)
    return items[0] if len(items) == 1 else None


def model_from_listing(device_id: int, listed: list[ListedGpu]) -> tuple[str, str]:
    """``(model, note)`` of a CUDA device no table maps to a listed GPU: the model when every CUDA
    GPU the export lists is one model, or when ``device_id`` is the CUDA ordinal of exactly one
    of them; else ``""`` and the reason (the note), for ``rate_source``."""
    gpus = [g for g in listed if g.cuda and g.name]
    models = sorted({board_name(g.name) for g in gpus})
    if len(models) == 1:
        return models[0], ""
    if not models:
        return "", NO_GPU_NAMED
    hit = _only(g for g in gpus if g.ordinal == device_id)
    if hit is not None:
        return board_name(hit.name), ""
    return "", (f"export lists GPUs of {len(models)} models ({', '.join(models)}) and does not say which one "
                "ran these kernels")


class _Listing:
    """What TARGET_INFO_GPU lists (``listed``), indexed once per report, so that identifying each of
    thousands of devices looks its GPU up instead of passing over every listed GPU (issue 42 point 14)."""

    def __init__(self, listed: list[ListedGpu]):
        self.listed = listed
        #: the listed CUDA boards (no MIG instance listed itself), in listed order
        self.boards = [g for g in listed if g.cuda and not is_mig(g.uuid)]
        #: every board is of one model and SM count (or none is listed)
        self.alike = len({(board_name(g.name), g.sms) for g in self.boards}) == 1
        self._boards_on: dict[str, list[ListedGpu]] = {}   # bus -> boards on it
        self._whole_on: dict[str, list[ListedGpu]] = {}    # bus -> listed GPUs on it that are no MIG instance
        self._all_on: dict[str, list[ListedGpu]] = {}      # bus -> every listed GPU on it
        for g in listed:
            if g.bus:
                self._all_on.setdefault(g.bus, []).append(g)
                if not is_mig(g.uuid):
                    self._whole_on.setdefault(g.bus, []).append(g)
        for g in self.boards:
            if g.bus:
                self._boards_on.setdefault(g.bus, []).append(g)
        self._models: dict[int, tuple[str, str]] = {}

    def board_on(self, bus: str) -> ListedGpu | None:
        """The one listed board on ``bus`` ("": none), else None."""
        return _only(self._boards_on.get(bus, ())) if bus else None

    def whole_on(self, bus: str) -> ListedGpu | None:
        """The one listed GPU on ``bus`` that is no MIG instance ("": none), else None."""
        return _only(self._whole_on.get(bus, ())) if bus else None

    def on_bus(self, bus: str) -> list[ListedGpu]:
        """Every listed GPU on ``bus`` ("": none), in listed order."""
        return self._all_on.get(bus, []) if bus else []

    def model(self, device_id: int) -> tuple[str, str]:
        """:func:`model_from_listing` of ``device_id`` (once per CUDA ordinal)."""
        if device_id not in self._models:
            self._models[device_id] = model_from_listing(device_id, self.listed)
        return self._models[device_id]


def _identify(pid: int, dev: int, cd: CudaDevice | None, gpu: ListedGpu | None, listing: _Listing) -> dict:
    """The devices-frame row of one (pid, CUDA ordinal) (see :func:`load_devices`)."""
    boards = listing.boards
    cd_uuid, gpu_uuid = (cd.uuid if cd else ""), (gpu.uuid if gpu else "")
    mig = next((u for u in (cd_uuid, gpu_uuid) if is_mig(u)), "")
    sms = cd.sms if cd and cd.sms else None
    bus = (gpu.bus if gpu else "") or (cd.bus if cd else "")
    if mig:
        board = gpu
        if gpu is not None and is_mig(gpu.uuid):  # the instance itself is listed: its board shares the bus
            sms = sms or gpu.sms
            board = listing.board_on(gpu.bus)
        elif gpu is None and listing.alike:
            board = boards[0]  # no gpuId, but every board the export lists is alike
        key, uuid = mig, mig
        model = board_name(board.name if board else (gpu.name if gpu else ""))
    else:
        board = gpu
        uuid = gpu_uuid or cd_uuid
        bare = uuid[4:] if uuid[:4].upper() == "GPU-" else uuid
        key = f"GPU-{bare}" if uuid else (f"bus-{bus}" if bus else f"pid{pid}/dev{dev}")
        model = board_name((gpu.name if gpu else "") or (cd.name if cd else ""))
    note = ""
    if not model:
        model, note = listing.model(dev)
    return {"pid": int(pid), "device_id": int(dev), "gpu_key": key, "gpu_model": model, "uuid": uuid, "bus": bus,
            "mig": bool(mig), "sms": int(sms or 0), "board_sms": int(board.sms or 0) if board else 0,
            "model_note": note}


def load_devices(schema: Schema, pairs: pd.DataFrame) -> tuple[pd.DataFrame, list]:
    """One row per (pid, device_id) in ``pairs`` (those that ran kernels) with its GPU, and warnings.

    Columns (:data:`DEVICE_COLUMNS`): ``gpu_key`` (``MIG-<uuid>`` for a MIG instance,
    ``GPU-<uuid>``, ``bus-<bus id>``, else ``pid<P>/dev<D>``), ``gpu_model`` ("" when unknown,
    ``model_note`` then says why), ``uuid``, ``bus``, ``mig``, ``sms`` (the SMs the process
    sees, 0 when unknown) and ``board_sms`` (its board's, 0 when unknown).

    GPUs that TARGET_INFO_GPU lists but that ran no kernel get no row: a GPU that was never
    traced (or not used) is not an idle GPU. A warning says how many (adapters that are not
    CUDA GPUs, and boards in use through their MIG instances, are not counted).
    """
    listed = listed_gpus(schema)
    listing = _Listing(listed)   # indexed once: each device looks its GPU up (thousands of GPUs: no pass each)
    by_ref = {g.ref: g for g in listed}
    cuda = cuda_devices(schema)
    rows, used = [], set()
    for pid, dev in zip(pairs["pid"].to_numpy(np.int64).tolist(), pairs["device_id"].to_numpy(np.int64).tolist()):
        cd = cuda.get((int(pid), int(dev))) or cuda.get((-1, int(dev)))
        gpu = by_ref.get(cd.gpu_id) if cd is not None and cd.gpu_id is not None else None
        if gpu is None and cd is not None and cd.bus:  # TARGET_INFO_CUDA_GPU: the bus id names the listed GPU
            gpu = listing.whole_on(cd.bus)
        if gpu is not None:
            used.add(gpu.ref)
            if is_mig(gpu.uuid):  # an instance in use: its board is in use too
                used.update(g.ref for g in listing.on_bus(gpu.bus))
        rows.append(_identify(pid, dev, cd, gpu, listing))
    devices = devices_frame(rows)
    return devices, _untraced_gpus([g for g in listed if g.cuda], used, devices)


#: The numeric columns of the devices frame and their types (the others are text).
_DEVICE_TYPES = {"pid": np.int64, "device_id": np.int64, "mig": bool, "sms": np.int64, "board_sms": np.int64}


def devices_frame(rows: list[dict]) -> pd.DataFrame:
    """The devices frame (:data:`DEVICE_COLUMNS`) of ``rows`` (one dict per device, those keys): pid,
    device_id, sms and board_sms int64, mig bool, the others text (object when there is no row), as
    ``pd.DataFrame(rows).astype(...)`` makes them, column by column (a fraction of its cost)."""
    columns = {}
    for c in DEVICE_COLUMNS:
        values = [row[c] for row in rows]
        columns[c] = (np.array(values, dtype=_DEVICE_TYPES[c]) if c in _DEVICE_TYPES
                      else values if values else np.zeros(0, dtype=object))
    return pd.DataFrame(columns)


def _gpu_label(gpu: ListedGpu) -> str:
    return f"GPU-{gpu.uuid}" if gpu.uuid else (f"bus-{gpu.bus}" if gpu.bus else f"id {gpu.ref}")


def _untraced_gpus(listed: list[ListedGpu], used: set, devices: pd.DataFrame) -> list[RowWarning]:
    """The warning about CUDA GPUs TARGET_INFO_GPU lists that ran no kernel (none when all ran some)."""
    if not listed or devices.empty:
        return []
    total = len(listed)
    if used:  # processes map to listed GPUs: name the ones without kernels
        idle = [g for g in listed if g.ref not in used]
        if not idle:
            return []
        return [RowWarning(WarningCode.GPUS_WITHOUT_KERNELS,
                           f"{len(idle)} of {total} GPUs listed in {GPU_TABLE} ran no kernel in this export "
                           f"({', '.join(_gpu_label(g) for g in idle)}): not traced or not used, so no row and "
                           "not counted as idle")]
    traced = devices["gpu_key"].nunique()
    if traced >= total:
        return []
    return [RowWarning(WarningCode.GPUS_WITHOUT_KERNELS,
                       f"{total - traced} of {total} GPUs listed in {GPU_TABLE} ran no kernel in this export "
                       f"(kernels identify {traced}): not traced or not used, so no row and not counted as idle")]


def sm_subset_warning(devices: pd.DataFrame) -> list[RowWarning]:
    """The warning of a GPU (its ``devices`` rows) whose processes see fewer SMs than its board
    although the export names no MIG instance: they may be MIG instances (their kernels are then
    wrongly unioned here) or share the board under an MPS SM limit; the export cannot say which.
    Code ``MIG_UNRESOLVED`` (the row is partial). [] for MIG instances and whole GPUs."""
    sms = devices["sms"].to_numpy(np.int64)
    subset = ~devices["mig"].to_numpy(bool) & (sms > 0) & (sms < devices["board_sms"].to_numpy(np.int64))
    if not subset.any():
        return []
    part = devices[subset]
    board = int(part["board_sms"].max())
    known = devices[devices["sms"] > 0].sort_values("pid")[["pid", "sms"]].drop_duplicates()
    seen = " and ".join(f"pid {int(p)} sees {int(s)}" for p, s in known.itertuples(index=False))
    if devices["pid"].nunique() > 1:
        return [RowWarning(WarningCode.MIG_UNRESOLVED,
                           f"{seen} of this GPU's {board} SMs (MIG instances or an MPS SM limit), but the export "
                           "names no MIG instance (no MIG- uuid): their kernels are unioned on this row (if they "
                           "ran on separate MIG instances, its idle is understated) and it is priced as the whole GPU")]
    return [RowWarning(WarningCode.MIG_UNRESOLVED,
                       f"{seen} of this GPU's {board} SMs (a MIG instance or an MPS SM limit), but the export names "
                       "no MIG instance (no MIG- uuid): it is priced as the whole GPU")]
