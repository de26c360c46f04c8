"""`POST /api/report`: uploaded logs and bench results, saved, inflated within a budget and
analysed as `preemptscope report` would.

Owns the upload limits (a gzip bomb cannot become gigabytes to parse), the client-side file
names in errors and reports (never our temp paths) and the `window` form field. Never serves
anything itself: exporter/app.py routes to `report_from_uploads`.
"""

from __future__ import annotations

import re
import tempfile
import zlib
from pathlib import Path
from typing import Any

from preemptscope.analysis.analyze import analyze
from preemptscope.analysis.params import AnalysisParams
from preemptscope.exporter.api_errors import ApiError
from starlette.datastructures import UploadFile

from preemptscope.errors import PreemptscopeError
from preemptscope.settings import parse_duration

__all__ = ["MAX_UPLOAD_WINDOW_S", "UPLOAD_EXPANSION", "report_from_uploads", "upload_window"]

TEXT_SNIFF_BYTES = 64 * 1024
# A .gz upload may expand to this many times --max-upload (vLLM logs compress ~10-20x).
UPLOAD_EXPANSION = 16
MAX_UPLOAD_WINDOW_S = 86400.0  # a day per window: beyond, nothing a report shows makes sense


def upload_window(raw: Any, default: float) -> float:
    """The `window` form field: seconds or a duration (30s, 5m); finite, > 0, at most a day."""
    if raw is None or raw == "":
        return default
    if not isinstance(raw, str):
        raise ApiError(422, "window: expected a form value, not a file")
    try:
        value = parse_duration(raw)
    except ValueError as exc:
        raise ApiError(422, f"window: {exc}") from None
    if value > MAX_UPLOAD_WINDOW_S:
        raise ApiError(422, f"window: at most {MAX_UPLOAD_WINDOW_S:g} s (a day), got {raw!r}")
    return value


async def report_from_uploads(
    logs: list[UploadFile], benches: list[UploadFile], window_s: float, *, max_inflated: int
) -> Any:
    from starlette.concurrency import run_in_threadpool

    with tempfile.TemporaryDirectory(prefix="preemptscope-upload-") as tmp:
        log_paths = [await _save(upload, Path(tmp), "log", i) for i, upload in enumerate(logs)]
        bench_paths = [
            await _save(upload, Path(tmp), "bench", i) for i, upload in enumerate(benches)
        ]
        # One budget for all uploads: a gzip bomb must not become gigabytes to parse.
        budget = [max_inflated]
        log_paths = [await run_in_threadpool(_inflate, s, budget) for s in log_paths]
        bench_paths = [await run_in_threadpool(_inflate, s, budget) for s in bench_paths]
        return await run_in_threadpool(_analyze_files, log_paths, bench_paths, window_s)


def _inflate(spec: str, budget: list[int]) -> str:
    """A gzip upload, decompressed into a plain file with at most `budget[0]` bytes (shared by
    the request's uploads); 413 beyond. Plain uploads are returned as they are."""
    path_text, _, name = spec.rpartition("=")
    path = Path(path_text)
    with path.open("rb") as handle:
        if handle.read(2) != b"\x1f\x8b":
            return spec
    # Beside the upload, under the same `N-name` (without .gz): _strip_tmp shows the name.
    inflated = path.parent / "preemptscope-upload-inflated"
    inflated.mkdir(exist_ok=True)
    target = inflated / path.name.removesuffix(".gz")
    limit = budget[0]
    decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
    written = 0
    try:
        with path.open("rb") as source, target.open("wb") as out:
            while raw := source.read(1 << 20):
                while raw:
                    # max_length bounds each step (a bomb expands 1000-fold); members are
                    # concatenated gzip streams, as `cat a.gz b.gz` makes.
                    data = decoder.decompress(raw, limit + 1 - written)
                    written += len(data)
                    if written > limit:
                        raise ApiError(
                            413,
                            f"{_client_name(path)}: more than {limit} bytes once decompressed"
                            " (raise --max-upload, or upload fewer or smaller files)",
                            detail={"limit_bytes": limit},
                        )
                    out.write(data)
                    if decoder.eof:
                        raw = decoder.unused_data
                        decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
                    else:
                        raw = decoder.unconsumed_tail
    except zlib.error as exc:
        raise ApiError(422, f"{_client_name(path)}: broken gzip data ({exc})") from None
    path.unlink()
    budget[0] -= written
    return f"{target}={name}"


def _client_name(path: Path) -> str:
    return path.name.split("-", 1)[-1]


async def _save(upload: UploadFile, directory: Path, kind: str, index: int) -> str:
    """Write an upload to a temp file named after a sanitised client file name."""
    name = Path(upload.filename or f"{kind}{index}").name
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)[:100] or kind
    path = directory / f"{index}-{safe}"
    head = await upload.read(TEXT_SNIFF_BYTES)
    if b"\x00" in head and not head.startswith(b"\x1f\x8b"):
        raise ApiError(415, f"{name}: binary content, expected a text log or JSON (or .gz)")
    if (
        kind == "bench"
        and not head.lstrip().startswith((b"{", b"["))
        and not name.endswith((".csv", ".jsonl"))
    ):
        raise ApiError(415, f"{name}: expected bench results as JSON, JSONL or CSV")
    with path.open("wb") as handle:
        handle.write(head)
        while chunk := await upload.read(1 << 20):
            handle.write(chunk)
    # The deployment is the uploaded file's stem, as for `preemptscope report FILE`.
    stem = Path(safe).name.split(".")[0] or kind
    return f"{path}={stem}"


def _analyze_files(log_specs: list[str], bench_specs: list[str], window_s: float) -> Any:
    from preemptscope.inputs import load_inputs

    try:
        inputs = load_inputs(log_specs, (), bench_specs)
        report = analyze(inputs, AnalysisParams(window_s=window_s))
    except PreemptscopeError as exc:
        raise ApiError(422, _strip_tmp(str(exc))) from None
    body = report.to_dict()
    for source in body.get("sources", []):
        source["path"] = _strip_tmp(source.get("path", ""))
    for deployment in body.get("deployments", []):
        deployment["sources"] = [_strip_tmp(p) for p in deployment.get("sources", [])]
    return body


def _strip_tmp(text: str) -> str:
    """Show the client's file name, not our temp path."""
    return re.sub(r"/\S*preemptscope-upload-[^/\s]+/\d+-", "", text)
