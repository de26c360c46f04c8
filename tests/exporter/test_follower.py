"""tail -F semantics of FileFollower: rotation, truncation, partial lines, restarts."""

from __future__ import annotations

import json
import os
import random
import shutil
import threading
import time
from collections import Counter
from pathlib import Path

from preemptscope.exporter.follower import Chunk, FileFollower, FollowerCheckpoint


def lines_of(chunks: list[Chunk]) -> list[str]:
    return [line for chunk in chunks for line in chunk.lines]


def append(path: Path, text: str) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(text)


def roundtrip(checkpoint: FollowerCheckpoint) -> FollowerCheckpoint:
    return FollowerCheckpoint.from_dict(json.loads(json.dumps(checkpoint.to_dict())))


def test_new_lines_and_partial_last_line(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    append(log, "one\ntwo\nthr")
    follower = FileFollower(str(log))
    chunks = follower.poll()
    assert lines_of(chunks) == ["one", "two"]
    assert chunks[0].first_line == 1 and chunks[0].new_incarnation
    assert follower.poll() == []
    append(log, "ee\nfour\n")
    chunks = follower.poll()
    assert lines_of(chunks) == ["three", "four"]
    assert chunks[0].first_line == 3 and not chunks[0].new_incarnation


def test_file_that_appears_later(tmp_path: Path) -> None:
    log = tmp_path / "late.log"
    follower = FileFollower(str(log))
    assert follower.poll() == []
    append(log, "hello\n")
    assert lines_of(follower.poll()) == ["hello"]


def test_rename_rotation_drains_old_file(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    now = [0.0]
    events: list[str] = []
    follower = FileFollower(
        str(log), drain_grace=1.0, clock=lambda: now[0], on_rotation=events.append
    )
    append(log, "a1\na2\n")
    assert lines_of(follower.poll()) == ["a1", "a2"]
    # The writer still has the old file open after the rename (logrotate `create`).
    with open(log, "a", encoding="utf-8") as old:
        os.rename(log, tmp_path / "a.log.1")
        append(log, "b1\n")
        old.write("a3\na4-partial")
        old.flush()
        chunks = follower.poll()
        assert sorted(lines_of(chunks)) == ["a3", "b1"]
        old.write("-done\n")
    assert events == ["rename"]
    new_chunk = next(c for c in chunks if c.lines == ["b1"])
    assert new_chunk.new_incarnation and new_chunk.first_line == 1
    now[0] = 0.5
    assert lines_of(follower.poll()) == ["a4-partial-done"]
    now[0] = 2.0
    assert follower.poll() == []
    assert follower.checkpoint().draining == ()


def test_a_rename_seen_before_the_new_file_is_a_rename(tmp_path: Path) -> None:
    """logrotate renames, then the writer reopens: a poll in between finds no file at the
    path. The old file still has a name, so it is a rename (issue 25 counted it `missing`);
    a file deleted outright is `missing`."""
    log = tmp_path / "a.log"
    events: list[str] = []
    follower = FileFollower(str(log), on_rotation=events.append)
    append(log, "a1\n")
    assert lines_of(follower.poll()) == ["a1"]
    os.rename(log, tmp_path / "a.log.1")
    append(tmp_path / "a.log.1", "a2\n")
    assert lines_of(follower.poll()) == ["a2"]
    append(log, "b1\n")
    assert lines_of(follower.poll()) == ["b1"]
    assert events == ["rename"]
    log.unlink()
    follower.poll()
    assert events == ["rename", "missing"]


def test_renamed_file_quiet_partial_line_is_flushed(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    now = [0.0]
    follower = FileFollower(str(log), drain_grace=1.0, clock=lambda: now[0])
    append(log, "x\nlast-without-newline")
    assert lines_of(follower.poll()) == ["x"]
    os.rename(log, tmp_path / "a.log.1")
    assert follower.poll() == []
    now[0] = 5.0
    assert lines_of(follower.poll()) == ["last-without-newline"]


def test_copytruncate_recovers_unread_tail_from_copy(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    events: list[str] = []
    follower = FileFollower(str(log), on_rotation=events.append)
    append(log, "l1\nl2\n")
    assert lines_of(follower.poll()) == ["l1", "l2"]
    append(log, "l3\nl4\n")  # written but not read before the rotation
    shutil.copyfile(log, tmp_path / "a.log.1")
    os.truncate(log, 0)
    append(log, "n1\nn2\nn3\nn4\nn5\n")  # longer than before: size alone would not tell
    chunks = follower.poll()
    assert lines_of(chunks) == ["l3", "l4", "n1", "n2", "n3", "n4", "n5"]
    assert events == ["copytruncate"]
    assert chunks[0].first_line == 3 and not chunks[0].new_incarnation
    assert chunks[1].first_line == 1 and chunks[1].new_incarnation
    assert chunks[0].incarnation != chunks[1].incarnation
    assert follower.gaps == 0


def test_truncation_without_copy_is_reported(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    events: list[str] = []
    now = [0.0]
    follower = FileFollower(str(log), on_rotation=events.append, clock=lambda: now[0])
    append(log, "first line\n")
    follower.poll()
    os.truncate(log, 0)
    append(log, "x\n")
    assert lines_of(follower.poll()) == ["x"]
    assert events == ["truncate"] and follower.gaps == 0  # the copy may still appear
    now[0] = 11.0
    follower.poll()
    assert follower.gaps == 1


def test_copy_that_appears_after_the_truncation_is_resumed(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    now = [0.0]
    follower = FileFollower(str(log), drain_grace=1.0, clock=lambda: now[0])
    append(log, "l1\n")
    assert lines_of(follower.poll()) == ["l1"]
    append(log, "l2\n")
    content = log.read_bytes()
    os.truncate(log, 0)  # truncated first, copy written late (a slow copy elsewhere)
    append(log, "n1\n")
    assert lines_of(follower.poll()) == ["n1"]
    (tmp_path / "a.log.1").write_bytes(content)
    got = lines_of(follower.poll())
    now[0] = 20.0
    got += lines_of(follower.poll())
    assert got == ["l2"] and follower.gaps == 0


def test_start_at_end_skips_existing_lines_only_the_first_time(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    append(log, "old\n")
    follower = FileFollower(str(log), start_at="end")
    assert follower.poll() == []
    append(log, "new\n")
    assert lines_of(follower.poll()) == ["new"]


def test_restart_resumes_and_rereads_partial_line(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    append(log, "a\nb\npart")
    follower = FileFollower(str(log))
    assert lines_of(follower.poll()) == ["a", "b"]
    checkpoint = roundtrip(follower.checkpoint())
    follower.close()
    append(log, "ial\nc\n")
    resumed = FileFollower(str(log), checkpoint)
    chunks = resumed.poll()
    assert lines_of(chunks) == ["partial", "c"]
    assert chunks[0].first_line == 3 and not chunks[0].new_incarnation


def test_restart_after_rename_and_copytruncate_while_down(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    append(log, "r1\n")
    follower = FileFollower(str(log), drain_grace=0.0)
    assert lines_of(follower.poll()) == ["r1"]
    checkpoint = roundtrip(follower.checkpoint())
    follower.close()
    # While down: more lines, a rename rotation, more lines, a copytruncate, more lines.
    append(log, "r2\n")
    os.rename(log, tmp_path / "a.log.1")
    append(log, "s1\ns2\n")
    shutil.copyfile(log, tmp_path / "a.log-copy")
    os.truncate(log, 0)
    append(log, "t1\n")
    resumed = FileFollower(str(log), checkpoint, drain_grace=0.0)
    got = lines_of(resumed.poll()) + lines_of(resumed.poll())
    assert sorted(got) == ["r2", "s1", "s2", "t1"]
    assert resumed.gaps == 0


def test_restart_when_rotated_file_is_gone_counts_a_gap(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    append(log, "r1\n")
    follower = FileFollower(str(log))
    follower.poll()
    checkpoint = follower.checkpoint()
    follower.close()
    os.rename(log, tmp_path / "a.log.1.gz")  # compressed copies cannot be read back
    append(log, "new\n")
    resumed = FileFollower(str(log), checkpoint)
    assert lines_of(resumed.poll()) == ["new"]
    assert resumed.gaps == 1


def _rotate(path: Path, how: str) -> None:
    """logrotate-style: shift a.log.N -> a.log.N+1, then rename or copy+truncate a.log."""
    numbered = sorted(
        (int(p.name.rsplit(".", 1)[1]), p) for p in path.parent.glob(path.name + ".*")
    )
    for number, rotated in reversed(numbered):
        os.rename(rotated, path.with_name(f"{path.name}.{number + 1}"))
    if how == "rename":
        os.rename(path, path.with_name(path.name + ".1"))
    else:
        shutil.copyfile(path, path.with_name(path.name + ".1"))
        os.truncate(path, 0)


class Writer(threading.Thread):
    """Appends numbered lines, rotating the file `rotations` times at random points."""

    def __init__(self, path: Path, total: int, rotations: int, seed: int) -> None:
        super().__init__(daemon=True)
        self.path, self.total, self.rotations = path, total, rotations
        self.random = random.Random(seed)
        self.kinds: Counter[str] = Counter()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # surfaced by the test
            self.error = exc

    def _run(self) -> None:
        rotate_at = set(self.random.sample(range(1, self.total), self.rotations))
        handle = open(self.path, "ab", buffering=0)  # noqa: SIM115 - reopened on rotation
        reopen_in: int | None = None
        for number in range(self.total):
            if number in rotate_at:
                how = self.random.choice(["rename", "copytruncate"])
                self.kinds[how] += 1
                if reopen_in is not None:
                    handle.close()
                    handle = open(self.path, "ab", buffering=0)  # noqa: SIM115
                    reopen_in = None
                _rotate(self.path, how)
                if how == "rename":
                    # Some writers reopen at once, others write on to the renamed file a bit.
                    reopen_in = self.random.choice([0, 0, 1, 3])
            if reopen_in is not None:
                if reopen_in == 0:
                    handle.close()
                    handle = open(self.path, "ab", buffering=0)  # noqa: SIM115
                    reopen_in = None
                else:
                    reopen_in -= 1
            text = f"line {number:06d}\n".encode()
            if self.random.random() < 0.05:
                # A line written in two pieces: the follower must wait for its end.
                handle.write(text[:5])
                time.sleep(0.002)
                handle.write(text[5:])
            else:
                handle.write(text)
            if number % 20 == 0:
                time.sleep(0.001)
        handle.close()


def test_rotation_chaos_every_line_exactly_once(tmp_path: Path) -> None:
    total, rotations = 12_000, 100
    log = tmp_path / "vllm.log"
    log.touch()
    writer = Writer(log, total, rotations, seed=4)
    seen: list[str] = []
    kept_at_checkpoint = 0
    checkpoint: FollowerCheckpoint | None = None
    follower = FileFollower(str(log), drain_grace=0.3)
    rng = random.Random(7)
    restarts = {"clean": 0, "crash": 0}
    follower.poll()  # following starts here; rotations before it are none of its business
    writer.start()
    deadline = time.monotonic() + 60
    phase = 0
    while time.monotonic() < deadline:
        seen.extend(lines_of(follower.poll()))
        if phase == 0 and len(seen) > total * 0.3:
            # Clean restart: checkpoint, stop, stay down while the writer rotates on.
            checkpoint = roundtrip(follower.checkpoint())
            follower.close()
            time.sleep(rng.uniform(0.2, 0.5))
            follower = FileFollower(str(log), checkpoint, drain_grace=0.3)
            restarts["clean"] += 1
            phase = 1
        elif phase == 1 and len(seen) > total * 0.5:
            checkpoint, kept_at_checkpoint = roundtrip(follower.checkpoint()), len(seen)
            phase = 2
        elif phase == 2 and len(seen) > total * 0.7:
            # Crash: lines read after the last checkpoint were never committed; forget them.
            follower.close()
            del seen[kept_at_checkpoint:]
            assert checkpoint is not None
            time.sleep(rng.uniform(0.1, 0.3))
            follower = FileFollower(str(log), checkpoint, drain_grace=0.3)
            restarts["crash"] += 1
            phase = 3
        if not writer.is_alive() and len(seen) >= total:
            break
        time.sleep(0.005)
    writer.join(timeout=5)
    # Let draining files expire so any held-back line would surface.
    time.sleep(0.4)
    seen.extend(lines_of(follower.poll()))
    follower.close()
    assert writer.error is None
    assert restarts == {"clean": 1, "crash": 1}
    assert writer.kinds["rename"] > 20 and writer.kinds["copytruncate"] > 20
    counts = Counter(seen)
    duplicated = [line for line, n in counts.items() if n > 1]
    missing = [f"line {n:06d}" for n in range(total) if f"line {n:06d}" not in counts]
    assert not duplicated, f"{len(duplicated)} lines counted twice, e.g. {duplicated[:5]}"
    assert not missing, f"{len(missing)} lines lost, e.g. {missing[:5]}"
    assert len(seen) == total
    assert follower.gaps == 0
