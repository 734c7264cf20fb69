"""What ``gpu-idle report`` rendered into a folder (the report file and its GPU pages), as the product
records it: in the folder's own manifest (a run folder, a sweep night, a new folder) or, in a folder
that is not the product's, in :data:`PAGES_MANIFEST` beside the report. ``gpu-idle run`` reads it to
remove only what a report of its own rendered there. Light on imports: the run loads it, the page
renderer (:mod:`pipeline.report.gpu_page`) writes through it.
"""
from __future__ import annotations

import os

from ..fleet.outputs import PAGES_DIR
from ..io import LOCK, file_entry, prune, real_dir, remove_if_empty
from ..store.results import MANIFEST, read_manifest, write_folder_manifest

#: Beside a report written with GPU pages into a folder that is not the product's (no manifest of its own,
#: and other files in it): the product's record of what it rendered there, the pages in ``gpu-pages/``
#: and the report file (:func:`~pipeline.store.results.read_manifest`'s format). A run folder, a sweep
#: night or a new folder records them in its own manifest instead (:func:`record_name`).
PAGES_MANIFEST = ".gpu-pages.json"


def record_name(report_dir: str) -> str:
    """The file that records what a report rendered into ``report_dir``: the folder's own manifest
    (:data:`~pipeline.store.results.MANIFEST`) when it has one or holds nothing yet, else :data:`PAGES_MANIFEST`."""

    if read_manifest(report_dir, PAGES_MANIFEST) is not None:
        return PAGES_MANIFEST
    if read_manifest(report_dir) is not None:
        return MANIFEST
    try:
        empty = not [n for n in os.listdir(report_dir) if n != LOCK]
    except FileNotFoundError:
        empty = True
    return MANIFEST if empty else PAGES_MANIFEST


def record(report_dir: str, name: str, files: dict, doc: dict | None, report: str) -> None:
    """Write the record ``name`` in ``report_dir`` with ``files``, keeping what else ``doc`` (the record as
    read) says (a run's inputs digest and completeness, a night's report inputs); ``report``: the report file."""

    doc = doc or {"inputs": None, "complete": False}
    extra = {k: v for k, v in doc.items() if k not in ("inputs", "complete", "files", "report")}
    write_folder_manifest(report_dir, files, doc.get("inputs"), doc.get("complete", False), name, report=report,
                          **extra)


def in_pages(files: dict) -> dict:
    """``name -> entry`` of a record's files in ``gpu-pages/``."""
    return {rel[len(PAGES_DIR) + 1:]: e for rel, e in files.items() if rel.startswith(PAGES_DIR + "/")}


def pages_folder(report_path: str) -> str:
    """``gpu-pages/`` beside a report file."""
    return os.path.join(os.path.dirname(os.path.abspath(report_path)), PAGES_DIR)


def _report_record(report_path: str) -> tuple[str, str, dict] | None:
    """``(folder, record name, record)`` of the record that claims the report file ``report_path``."""

    report_dir = os.path.dirname(os.path.abspath(report_path))
    for name in (PAGES_MANIFEST, MANIFEST):
        doc = read_manifest(report_dir, name)
        if doc is not None and doc.get("report") == os.path.basename(report_path):
            return report_dir, name, doc
    return None


def written_pages(report_path: str) -> int:
    """How many GPU pages the record of the report ``report_path`` lists
    (:func:`~pipeline.report.gpu_page.write_gpu_pages`)."""
    found = _report_record(report_path)
    return len(in_pages(found[2]["files"])) if found else 0


def record_report(report_path: str) -> None:
    """Record the report file just written (its size and SHA-256) in the record of its GPU pages
    (:func:`~pipeline.report.gpu_page.write_gpu_pages`), so that a later ``gpu-idle run`` into the folder
    can prove it rendered it. Raises OSError when the record cannot be written."""
    found = _report_record(report_path)
    if found is not None:
        report_dir, name, doc = found
        files = {**doc["files"], os.path.basename(report_path): file_entry(report_path)}
        record(report_dir, name, files, doc, os.path.basename(report_path))


def remove_rendered(report_dir: str) -> tuple[list[str], list[str]]:
    """Remove the report and GPU pages that ``gpu-idle report`` rendered into ``report_dir`` (as the
    folder's record proves, :func:`~pipeline.report.gpu_page.write_gpu_pages`: a file changed since it
    was written, or one it does not list, is kept), their entries in the record (:data:`PAGES_MANIFEST` goes), and ``gpu-pages/``
    when that leaves it empty. Returns ``(removed file paths, removed folders)``. Raises OutputError
    when ``gpu-pages`` is a symbolic link, OSError when a file cannot be removed."""

    folder = os.path.join(report_dir, PAGES_DIR)
    removed = []
    for name in (PAGES_MANIFEST, MANIFEST):
        doc = read_manifest(report_dir, name)
        report = doc.get("report") if doc else None
        if not isinstance(report, str):
            continue
        rendered = {report} | {rel for rel in doc["files"] if rel.startswith(PAGES_DIR + "/")}
        top = {rel: e for rel, e in doc["files"].items() if rel == report and "/" not in rel}
        removed += [os.path.join(report_dir, n) for n in prune(report_dir, set(), top)]
        if os.path.lexists(folder):
            removed += [os.path.join(folder, n) for n in prune(real_dir(folder), set(), in_pages(doc["files"]))]
        if name == PAGES_MANIFEST:
            os.unlink(os.path.join(report_dir, name))
        else:
            rest = {rel: e for rel, e in doc["files"].items() if rel not in rendered}
            record(report_dir, name, rest, dict(doc, complete=False, inputs=None), None)
    return removed, [folder] if removed and remove_if_empty(folder) else []


def rendered_files(report_dir: str) -> set[str]:
    """The paths (relative to ``report_dir``) of what ``gpu-idle report`` rendered there into a folder that
    was not the product's, as :data:`PAGES_MANIFEST` lists them, and that record itself; empty without one."""

    doc = read_manifest(report_dir, PAGES_MANIFEST)
    return set(doc["files"]) | {PAGES_MANIFEST} if doc else set()


