"""Issue 47's labelling on a lent GPU: cold-start the score-only Qwen2.5-Coder-1.5B judge on SemEval gold labels
(`score-only-qwen-coder-1.5b-cqa-gpu`, the recipe of the C dev 0.490 judge), label C dev with it as a check, then
label the 100k-pair set (`r3edge pairs --semeval`) in shards, each finished shard shipped back at once.

Subcommands (README.md gives the device calls in order):

    cold-start (there)  teacher_sft, keeping the LoRA adapter (int8) before the merge; C dev; then shards. With
                        `--sft r3a-qwen-coder-1.5b-cqa-gpu --shards 0` the R3A judge for issue 47's second label
                        source: a 5,000-pair subset (`R3A=1 run.sh cold-start`; again on the same machine, it goes on)
    label      (there)  rebuild the same judge from the base and the carried adapter; shards not yet done
    students   (there)  after the last shard: merge the 100k labels, train the MiniLM arms (6.7k and 100k)
    flush      (there)  ship what is left in the outbox (a call's $OUT holds at most 8 files, 64 MiB)
    unpack     (here)   the returned bundles -> the labels folder, the adapter's and the students' pieces
    verify     (here)   rebuild the judge from a committed adapter and relabel C dev pairs against its labels
    compare    (here)   two labellings of the same pairs: argmax agreement, |delta expected score|
    report     (here)   pairs/s and device-seconds per 1,000 pairs of each shard (GPU calls, CPU sittings); the C dev check
    same-judge (here)   label_cpu.sh, before a CPU sitting: the rebuilt judge's weights are the cold start's
    sitting    (here)   label_cpu.sh, after it: the shard's teacher config is the GPU shards'; the sitting's record

Shards: `label_pairs(..., shard="i/N")`, every query in one shard (r3edge's hash of its qid), each into its own
folder; a shard whose manifest is complete is never labelled again. A shard cut mid-way resumes at its last
written chunk in the same machine and is redone on a fresh one. Shipping: every file to bring home goes into an
outbox; after each step the files not yet shipped are appended to tar bundles in $OUT (<= 15 MiB each, at most 7,
with run.json the 8th file), so a call stopped at its limit returns what it finished. What does not fit waits for
the next call (`flush`).

The weights: the packaged GGUF (`r3edge[judge-qwen]`, 22 packages, ~1.1 GB) travels in the bundle's pieces
(prepare.sh); `judge_qwen_coder_gpu.py`'s stand-in packages feed it to r3edge's pinned reassembly. The
cold-started judge (3 GB) cannot travel; its LoRA adapter can: 18.5M parameters rounded to int8 before the merge
(`keep_adapter`), 18.5 MB, small enough to commit (issue 47 allows <= 20 MB), and `label` merges it onto the same fp32
base as `teacher_sft` did, so a later session on a fresh box labels with the same judge: the merged weights' sha256 is
recorded by both and must agree.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import sys
import tarfile
import time
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "scripts"))  # judge_qwen_coder_gpu: stand-in packages, machine, smoke model

SFT_CONFIG = "score-only-qwen-coder-1.5b-cqa-gpu"
#: ~20,000 pairs per shard: ~60 s at the measured 333 pairs/s, plus ~9 s of loading the judge (label_pairs loads it
#: per call), so a cut call loses at most a minute and five loads cost ~45 s
SHARDS = 5
BUNDLE = 15 * 1048576  # bytes per returned bundle and per adapter piece (a returned file is at most 16 MiB)
MAX_BUNDLES = 7  # + run.json = the 8 files a call returns
OUT_BYTES = 60 * 1048576  # of the 64 MiB a call returns
SMOKE_PAIRS = 50


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(1 << 22):
            h.update(block)
    return h.hexdigest()


# --- shipping ----------------------------------------------------------------------------------------

def _piece(name: str) -> bool:
    """A piece of a split folder (`split_folder`: NAME.tar.NN), shipped after everything else."""
    stem, _, k = name.rpartition(".")
    return stem.endswith(".tar") and k.isdigit()


class Outbox:
    """Files to bring home, shipped into $OUT as tar bundles within what one call returns."""

    def __init__(self, work: Path, out: Path):
        self.work, self.box, self.out = work, work / "outbox", out
        self.box.mkdir(parents=True, exist_ok=True)
        out.mkdir(parents=True, exist_ok=True)
        self.sent_file = work / "shipped.json"
        self.sent = set(json.loads(self.sent_file.read_text())) if self.sent_file.is_file() else set()
        self.bundles = sorted(out.glob("bundle-*.tar"))

    def put(self, src: Path, name: str | None = None) -> Path:
        dst = self.box / (name or src.name)
        tmp = dst.with_suffix(dst.suffix + ".tmp")
        shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
        return dst

    def put_tar(self, folder: Path, name: str) -> Path:
        tmp = self.box / (name + ".tmp")
        with tarfile.open(tmp, "w") as tar:
            tar.add(folder, arcname=folder.name)
        os.replace(tmp, self.box / name)
        return self.box / name

    def ship(self, final: bool = False) -> list[str]:
        """Append unshipped outbox files (oldest first) to this call's bundles; returns what is still waiting.
        Pieces of a folder (the adapter's, a student's weights) go only when ``final`` (the call's work is done):
        labels and reports come first, and the pieces are needed only later.
        Each append is tried on a copy and kept only if the bundle and the call's total stay within the limits
        (tar pads to 10 KiB records, so sizes are measured, not estimated)."""
        waiting = sorted((p for p in self.box.iterdir() if p.name not in self.sent and not p.name.endswith(".tmp")
                          and (final or not _piece(p.name))),
                         key=lambda p: (_piece(p.name), p.stat().st_mtime, p.name))
        for p in waiting:
            targets = self.bundles[-1:] + ([None] if len(self.bundles) < MAX_BUNDLES else [])
            if not any(self._try(p, cur) for cur in targets):
                break
            self.sent.add(p.name)
            self.sent_file.write_text(json.dumps(sorted(self.sent)))
        return [p.name for p in self.box.iterdir() if p.name not in self.sent and not p.name.endswith(".tmp")]

    def _try(self, p: Path, cur: Path | None) -> bool:
        new = cur is None
        if new:
            cur = self.out / f"bundle-{time.strftime('%H%M%S')}-{len(self.bundles):02d}.tar"
        tmp = self.work / (cur.name + ".tmp")  # never a half-written bundle in $OUT
        if not new:
            shutil.copyfile(cur, tmp)
        with tarfile.open(tmp, "a" if not new else "w") as tar:
            tar.add(p, arcname=p.name)
        others = sum(b.stat().st_size for b in self.bundles if b != cur)
        if tmp.stat().st_size > BUNDLE or others + tmp.stat().st_size > OUT_BYTES:
            tmp.unlink()
            return False
        os.replace(tmp, cur)
        if new:
            self.bundles.append(cur)
        return True


# --- the judge -----------------------------------------------------------------------------------------

#: the adapter as it travels and is committed: int8 values with one fp32 scale per rank index (ADAPTER_CODEC)
ADAPTER_FILE = "adapter.int8.safetensors"
ADAPTER_CODEC = "int8, symmetric, one fp32 scale per rank index of each LoRA matrix"


@contextmanager
def keep_adapter(adapter_dir: Path):
    """Keep the LoRA adapter when `teacher_sft` merges it: the merged 3 GB judge cannot leave the machine, the adapter
    can, and merging it again onto the same base remakes the judge. A session's box is not kept, so the adapter must
    be committed, and the issue allows that at <= 20 MB: r=16 on every linear layer of the 1.5B is 18.5M parameters,
    74 MB in fp32, 37 MB in bf16, 18.5 MB as int8. So the adapter is rounded to int8 (`compact_adapter`) *before* the
    merge, and the judge that labels is the base plus exactly what travels: a later session rebuilds the same weights."""
    from peft import PeftModel
    from peft.utils import set_peft_model_state_dict

    def merge_and_unload(self, *args, **kwargs):
        self.save_pretrained(adapter_dir)
        set_peft_model_state_dict(self, expand_adapter(compact_adapter(adapter_dir)))
        return self.base_model.merge_and_unload(*args, **kwargs)

    assert "merge_and_unload" not in PeftModel.__dict__  # peft forwards it to the tuner: ours is found first
    PeftModel.merge_and_unload = merge_and_unload
    try:
        yield
    finally:
        del PeftModel.merge_and_unload


def compact_adapter(adapter_dir: Path) -> Path:
    """peft's fp32 adapter_model.safetensors -> ADAPTER_FILE (int8 + scales), and the fp32 file removed.
    Each LoRA matrix is rounded along its rank axis (lora_A is r x in, lora_B is out x r): one scale per rank index,
    absmax / 127, so no rank direction is flattened by another's range and the scales cost 2 x r floats a matrix."""
    import torch
    from safetensors.torch import load_file, save_file

    src = adapter_dir / "adapter_model.safetensors"
    out = {}
    for name, w in load_file(src).items():
        w = w.float()
        axis = 1 if "lora_A" in name else 0  # reduce over the axis that is not the rank's
        scale = (w.abs().amax(dim=axis, keepdim=True) / 127).clamp_min(torch.finfo(torch.float32).tiny)
        out[f"{name}.q"] = torch.round(w / scale).clamp(-127, 127).to(torch.int8).contiguous()
        out[f"{name}.scale"] = scale.contiguous()
    save_file(out, adapter_dir / ADAPTER_FILE, metadata={"codec": ADAPTER_CODEC})
    src.unlink()
    return adapter_dir / ADAPTER_FILE


def expand_adapter(compact: Path) -> dict:
    """ADAPTER_FILE -> peft's state dict in fp32: q x scale, the values the judge merges in every session."""
    from safetensors.torch import load_file

    t = load_file(compact)
    return {name[:-2]: t[name].float() * t[name[:-2] + ".scale"] for name in t if name.endswith(".q")}


def weights_sha256(model_dir: Path) -> str:
    files = sorted(model_dir.glob("*.safetensors"))
    return hashlib.sha256("".join(_sha256(f) for f in files).encode()).hexdigest()


def sft_config(smoke: bool, name: str = SFT_CONFIG):
    from judge_qwen_coder_gpu import SMOKE_MODEL

    from r3edge.core.config import ModelSpec
    from r3edge.distill.teacher.sft import load_sft_config

    sft = load_sft_config(name)
    if smoke:  # the judge script's random 2-layer Qwen2, a few traces and steps
        sft = sft.model_copy(update={"model": ModelSpec(**SMOKE_MODEL),
                                     "traces": sft.traces.model_copy(update={"per_label_cap": 8})})
    return sft


def rebuild_judge(sft, adapter_dir: Path, judge_dir: Path, report: dict) -> Path:
    """The cold-started judge from the base and its adapter, saved as `teacher_sft` saves it."""
    import torch
    from peft import PeftModel
    from safetensors.torch import save_file

    from r3edge.distill.label.driver import load_teacher_config
    from r3edge.distill.teacher.sft import _save, load_base

    save_file(expand_adapter(adapter_dir / ADAPTER_FILE), adapter_dir / "adapter_model.safetensors")
    spec = sft.model or load_teacher_config(sft.teacher).model  # the base teacher_sft trained on
    tokenizer, lm = load_base(spec)
    if torch.cuda.is_available():
        lm = lm.to("cuda")  # merged where teacher_sft merged it
    lm = PeftModel.from_pretrained(lm, adapter_dir).merge_and_unload()
    return _save(lm, tokenizer, spec, judge_dir, report)


# --- the steps -------------------------------------------------------------------------------------------

class Run:
    def __init__(self, args):
        from judge_qwen_coder_gpu import _machine

        self.args, self.t0 = args, time.time()
        self.work, self.out = Path(args.work), Path(args.out)
        self.box = Outbox(self.work, self.out)
        path = self.work / "run.json"
        self.run = json.loads(path.read_text()) if path.is_file() else {"steps": {}, "shards": {}}
        self.run["machine"] = _machine()
        self.run.setdefault("calls", []).append({"cmd": args.cmd, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                            time.gmtime())})

    def left(self) -> float:
        return self.args.budget_s - (time.time() - self.t0)

    def save(self, final: bool = False) -> None:
        self.run["calls"][-1]["elapsed_s"] = round(time.time() - self.t0, 1)
        self.run["waiting"] = self.box.ship(final)
        text = json.dumps(self.run, indent=2) + "\n"
        (self.work / "run.json").write_text(text)
        (self.out / "run.json").write_text(text)
        print(json.dumps({"elapsed_s": self.run["calls"][-1]["elapsed_s"], "waiting": len(self.run["waiting"])}),
              flush=True)

    def label(self, pairs: Path, out: Path, judge: Path, *, shard: str = "0/1", limit: int | None = None,
              until_s: float | None = None) -> dict:
        """``until_s``: stop after that many seconds (the call's budget), keeping the chunks written: label_pairs
        resumes from them in a later call on this machine."""
        from r3edge.core.labels import read_manifest
        from r3edge.distill.label.driver import label_pairs

        t0 = time.time()
        try:
            with _deadline(until_s):
                label_pairs(pairs, sft_config(self.args.smoke, self.args.sft).teacher, out, shard=shard, limit=limit,
                            teacher_model=judge, batch_size=self.args.batch_size, shard_size=self.args.chunk,
                            stream=sys.stdout)
        except _OutOfTime:
            print(f"{out.name}: stopped at the call's budget; the next call on this machine goes on", flush=True)
        man = read_manifest(out)
        return {"pairs": man.get("n_done"), "complete": man.get("complete"), "wall_s": round(time.time() - t0, 1),
                "labelling_s": man.get("summary", {}).get("wall_s")}

    def also(self, judge: Path) -> None:
        """The ``--also`` pairs files, each into labels/<stem> with the judge's SFT report, within the call's budget."""
        from r3edge.distill.teacher.sft import REPORT_FILE

        for pairs in map(Path, self.args.also):
            step = f"label_{pairs.stem}"
            if (self.run["steps"].get(step) or {}).get("complete"):
                continue
            got = self.label(pairs, self.work / "labels" / pairs.stem, judge,
                             limit=SMOKE_PAIRS if self.args.smoke else None, until_s=self.left() - self.args.reserve_s)
            self.run["steps"][step] = got
            if got["complete"]:
                shutil.copyfile(judge / REPORT_FILE, self.work / "labels" / pairs.stem / REPORT_FILE)
                self.box.put_tar(self.work / "labels" / pairs.stem, f"labels-{pairs.stem}.tar")
            self.save()
            if not got["complete"]:
                break

    def shards(self, judge: Path) -> None:
        """Every shard not yet complete, while the budget lasts (a shard is started only with its time left)."""
        n = self.args.shards
        done = {k for k, v in self.run["shards"].items() if v.get("complete")}
        if self.args.done and Path(self.args.done).is_file():  # complete in an earlier session (committed)
            done |= set(Path(self.args.done).read_text().split())
        started = 0
        for i in range(n):
            name = f"shard-{i:02d}-of-{n:02d}"
            if name in done:
                continue
            per = max([v["wall_s"] for v in self.run["shards"].values() if v.get("complete")] or [self.args.shard_s])
            if started == self.args.max_shards:
                break
            started += 1
            if self.left() < per + self.args.reserve_s:
                print(f"{name}: {self.left():.0f} s left, a shard takes ~{per:.0f} s: left for the next call", flush=True)
                break
            got = self.label(self.pairs, self.work / "labels" / name, judge, shard=f"{i}/{n}")
            self.run["shards"][name] = got
            if got["complete"]:
                self.box.put_tar(self.work / "labels" / name, f"labels-{name}.tar")
            self.save()

    @property
    def pairs(self) -> Path:
        return Path(self.args.pairs)


class _OutOfTime(BaseException):
    """A BaseException, as KeyboardInterrupt is, so that no ``except Exception`` on the way swallows it."""


@contextmanager
def _deadline(seconds: float | None):
    """Raise :class:`_OutOfTime` in this (main) thread after ``seconds``, and again each second until the block has
    ended; None: no limit."""
    if seconds is None:
        yield
        return

    def _raise(*_):
        raise _OutOfTime

    old = signal.signal(signal.SIGALRM, _raise)
    signal.setitimer(signal.ITIMER_REAL, max(1.0, seconds), 1.0)
    try:
        yield
    finally:
        while True:  # an alarm that lands during the cleanup must not skip it: the timer re-fires every second
            try:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, old)
                break
            except _OutOfTime:
                continue


def cold_start(args) -> int:
    """The cold start (skipped when an earlier call on this machine finished it), the ``--also`` files, the shards."""
    from r3edge.distill.teacher.sft import REPORT_FILE, teacher_sft

    r = Run(args)
    if not args.smoke:
        from judge_qwen_coder_gpu import _stand_in_packages

        _stand_in_packages(Path(args.gguf_dir), Path(args.stubs))
    judge, adapter = r.work / "judge", r.work / "adapter"
    if "cold_start" not in r.run["steps"]:
        t0 = time.time()
        with keep_adapter(adapter):
            teacher_sft(sft_config(args.smoke, args.sft), judge, gold=Path(args.gold),
                        max_steps=3 if args.smoke else None, log=lambda *a: print(*a, flush=True))
        r.run["steps"]["cold_start"] = {"wall_s": round(time.time() - t0, 1), "judge_sha256": weights_sha256(judge),
                                        "sft": args.sft}
        r.box.put(judge / REPORT_FILE)
        split_folder(adapter, r.box, "adapter")
        r.save()
    r.also(judge)  # C dev (the judge's check) and C train (the 6.7k-label student's labels), or R3A's subset
    r.shards(judge)
    r.save(final=True)
    return 0


def split_folder(folder: Path, box: Outbox, name: str) -> None:
    """A folder as one tar NAME.tar in BUNDLE-sized pieces (NAME.tar.NN) + NAME.sha256, into the outbox."""
    tar = folder.parent / f"{name}.tar"
    with tarfile.open(tar, "w") as t:
        t.add(folder, arcname=name)
    (folder.parent / f"{name}.sha256").write_text(f"{_sha256(tar)}  {name}.tar\n")
    with tar.open("rb") as fh:
        k = 0
        while block := fh.read(BUNDLE - 65536):  # a piece and its tar header fit one bundle
            piece = folder.parent / f"{name}.tar.{k:02d}"
            piece.write_bytes(block)
            box.put(piece)
            k += 1
    box.put(folder.parent / f"{name}.sha256")


def join_folder(pieces: Path, name: str, to: Path) -> Path:
    """`split_folder`'s inverse: NAME.tar.NN in ``pieces`` joined, checked against NAME.sha256, unpacked as to/NAME."""
    parts = sorted(pieces.glob(f"{name}.tar.[0-9][0-9]"))
    to.mkdir(parents=True, exist_ok=True)
    tar = to / f"{name}.tar"
    with tar.open("wb") as fh:
        for p in parts:
            fh.write(p.read_bytes())
    want = (pieces / f"{name}.sha256").read_text().split()[0]
    if _sha256(tar) != want:
        raise SystemExit(f"{name}.tar sha256 {_sha256(tar)} != {want}: {len(parts)} pieces in {pieces}; bring all")
    with tarfile.open(tar) as t:
        t.extractall(to, filter="data")
    tar.unlink()
    return to / name


def label(args) -> int:
    """The judge from the carried adapter pieces (once per machine), then the shards not yet done."""
    from r3edge.distill.teacher.sft import REPORT_FILE

    r = Run(args)
    if not args.smoke:
        from judge_qwen_coder_gpu import _stand_in_packages

        _stand_in_packages(Path(args.gguf_dir), Path(args.stubs))
    judge = r.work / "judge"
    if not (judge / REPORT_FILE).is_file():
        t0 = time.time()
        carried = join_folder(Path(args.adapter), "adapter", r.work / "carried")
        report = json.loads((Path(args.adapter) / REPORT_FILE).read_text())
        rebuild_judge(sft_config(args.smoke, args.sft), carried, judge, report)
        r.run["steps"]["rebuild_judge"] = {"wall_s": round(time.time() - t0, 1), "judge_sha256": weights_sha256(judge)}
        r.save()
    r.shards(judge)
    r.save(final=True)
    return 0


#: issue 47's MiniLM arms: the recommended recipe, each query once a step and bf16 (docs/distillation.md, "The chain at
#: 100k pairs": the comparison runs with it on both sides)
MINILM_CONFIG = "minilm-cqa-bi-rank-wise-q1"


def students(args) -> int:
    """The MiniLM arms of issue 47 on the GPU, after the last shard: merge the shards into the 100k labels (which
    proves them complete and disjoint), then train `MINILM_CONFIG` on this judge's C train labels (6.7k) and on the
    100k, each scored on C dev (`train_report.json`'s eval). A 2-core CPU needs hours for the 100k epoch, more than a
    session, and a session's box is not kept. Reports ship first, then each student's weights in pieces, for the
    other-domain checks on a CPU. The 100k arm gets the time left (`--max-seconds`); its report says where it
    stopped if it did."""
    from r3edge.distill.label.driver import merge_shards
    from r3edge.distill.student.train import train_student

    r = Run(args)
    labels = r.work / "labels"
    labels.mkdir(parents=True, exist_ok=True)
    if args.committed:  # labels of earlier sessions, carried in the bundle
        for d in sorted(Path(args.committed).iterdir()):
            if (d / "manifest.json").is_file() and not (labels / d.name).exists():
                shutil.copytree(d, labels / d.name)
    merged = r.work / "labels-100k"
    if not (merged / "manifest.json").is_file():
        t0 = time.time()
        merge_shards(r.pairs, [labels / f"shard-{i:02d}-of-{args.shards:02d}" for i in range(args.shards)], merged,
                     stream=sys.stdout)
        r.run["steps"]["merge"] = {"wall_s": round(time.time() - t0, 1)}
        r.save()
    r.run.setdefault("students", {})
    arms = (("6.7k", labels / "train"), ("100k", merged))
    for seed in range(args.seeds):
        if seed:
            # One seed per arm cannot decide issue 47's +0.01: three seeds of the 6.7k arm span 0.010 on C dev
            # (docs/distillation.md). Further seeds of both arms while the time lasts; their reports come back, not
            # weights. A seed starts only with the time for both arms (as long as their first seeds took), so the
            # arms stay paired.
            need = sum(r.run["students"][arm]["wall_s"] for arm, _ in arms)
            if f"100k-seed{seed}" not in r.run["students"] and r.left() - args.reserve_s < need:
                r.run["students"][f"seed{seed}"] = {"not_run": f"{r.left():.0f} s left; both arms' first seeds took "
                                                              f"{need:.0f} s"}
                break
        config = _seeded(args.config, seed, r.work) if seed else args.config
        for arm, src in arms:
            key = f"{arm}-seed{seed}" if seed else arm
            out = r.work / f"student-{key}"
            if (out / "train_report.json").is_file():
                continue
            t0 = time.time()
            train_student(src, config, out, eval_labels_dir=labels / "dev", max_steps=3 if args.smoke else None,
                          max_seconds=max(30.0, r.left() - args.reserve_s - args.after_train_s))
            rep = json.loads((out / "train_report.json").read_text())
            ev = (rep.get("eval") or {}).get("student_vs_gold") or {}
            r.run["students"][key] = {"wall_s": round(time.time() - t0, 1), "steps": rep.get("steps"),
                                      "stopped_by_time_at_step": rep.get("stopped_by_time_at_step"),
                                      "seconds_per_step": rep.get("seconds_per_step"), "c_dev_ndcg@10": ev.get("ndcg@10")}
            r.box.put(out / "train_report.json", f"student-{key}.train_report.json")
            if not seed:  # seed 0's weights come back, for the other-domain checks on a CPU
                split_folder(out, r.box, f"student-{key}")
            r.save()
    r.save(final=True)
    return 0


def _seeded(config: str, seed: int, work: Path) -> Path:
    """``config`` with ``train.seed`` set, written into ``work`` (the arms' other seeds)."""
    import yaml

    from r3edge.core.config import StudentConfig, load_yaml

    cfg = load_yaml(config, StudentConfig).model_dump(mode="json", exclude_none=True)
    cfg["train"]["seed"] = seed
    path = work / f"{Path(config).stem}-seed{seed}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def flush(args) -> int:
    r = Run(args)
    r.save(final=True)
    return 0


def unpack(args) -> int:
    """Here: every returned bundle's files -> labels/<shard>/ and adapter/ pieces under --to."""
    to = Path(args.to)
    (to / "labels").mkdir(parents=True, exist_ok=True)
    (to / "adapter").mkdir(parents=True, exist_ok=True)
    (to / "students").mkdir(parents=True, exist_ok=True)
    for b in sorted(Path(args.files).glob("bundle-*.tar")):
        with tarfile.open(b) as t:
            for m in t.getmembers():
                if m.name.startswith("labels-"):
                    t.extract(m, to, filter="data")
                    with tarfile.open(to / m.name) as inner:
                        inner.extractall(to / "labels", filter="data")
                    (to / m.name).unlink()
                elif m.name.startswith("student-"):  # a student's report, sha256 and weights' pieces
                    t.extract(m, to / "students", filter="data")
                else:
                    t.extract(m, to / "adapter", filter="data")
    run = Path(args.files) / "run.json"
    if run.is_file():
        call = json.loads(run.read_text())["calls"][-1]
        shutil.copyfile(run, to / f"run-{call['started'].replace(':', '')}-{call['cmd']}.json")
    print(f"unpacked into {to}: {sorted(p.name for p in (to / 'labels').iterdir())}; adapter: "
          f"{sorted(p.name for p in (to / 'adapter').iterdir())}; students: "
          f"{sorted(p.name for p in (to / 'students').iterdir())}")
    return 0


def report(args) -> int:
    """pairs/s and device-seconds per 1,000 pairs of every complete shard: the read-out (the manifest's wall time,
    summed over resumes) and with the judge's loading, from the GPU calls' run.json or, for a shard labelled on a CPU
    (`--cpu-labels`, label_cpu.sh's folder), from its sittings (sittings.jsonl beside it: the pairs each sitting
    added over its wall time, since a shard's first chunk may predate the log)."""
    from r3edge.core.labels import read_manifest

    labels = Path(args.labels)
    runs = [json.loads(p.read_text()) for p in sorted(labels.parent.glob("run-*.json"))]
    walls = {k: v["wall_s"] for r in runs for k, v in r.get("shards", {}).items() if v.get("complete")}
    mach = runs[-1]["machine"] if runs else {}
    gpu = mach.get("gpu") or "the CPU (no GPU)"
    rows = []  # name, pairs, read-out s, (pairs, s) with loading, where, device class, labels 0/1/2
    counts = lambda m: [m["summary"]["labels"].get(str(k), 0) for k in range(3)]  # noqa: E731
    for d in sorted(labels.glob("shard-*")):
        m = read_manifest(d)
        if m.get("complete"):
            p = m["summary"]["pairs"]
            rows.append((d.name, p, m["summary"]["wall_s"], (p, walls.get(d.name)), gpu, gpu, counts(m)))
    for folder in map(Path, args.cpu_labels or []):
        log = folder.parent / "sittings.jsonl"
        sits = [json.loads(line) for line in log.read_text().splitlines()] if log.is_file() else []
        for d in sorted(folder.glob("shard-*")):
            m = read_manifest(d)
            if d.name in {r[0] for r in rows} or not m.get("complete"):
                continue
            mine = [s for s in sits if s["shard"] == d.name]
            where = "; ".join(sorted({f"{s['cpu']}, {s['cores']} cores" for s in mine})) or "a CPU"
            device = " and ".join(sorted({f"{s['cores']}-core CPUs" for s in mine})) or "CPUs"
            loaded = (sum(s["pairs_after"] - s["pairs_before"] for s in mine), sum(s["wall_s"] for s in mine))
            rows.append((d.name, m["summary"]["pairs"], m["summary"]["wall_s"], loaded, where, device, counts(m)))
    rows.sort()
    n = sum(r[1] for r in rows)
    per = lambda p, w: f"{p / w:.3g} | {1000 * w / p:.3g}" if w and p else "– | –"  # noqa: E731
    c012 = lambda c: "/".join(f"{x:,}" for x in c)  # noqa: E731
    total = lambda g: [sum(r[6][k] for r in g) for k in range(3)]  # noqa: E731  (labels 0/1/2 over rows g)
    lines = [f"# Issue 47's labels: {n:,} pairs in {len(rows)} complete shards", "",
             f"GPU: {gpu} (torch {mach.get('torch')}, transformers {mach.get('transformers')}, "
             f"{mach.get('cpu_count')} CPU cores), in-process transformers." if runs else "No GPU call's run.json.",
             "Labels 0/1/2: the shards' manifests (`summary.labels`).",
             "", "| shard | labelled on | pairs | labels 0/1/2 | read-out s | pairs/s | device-s per 1,000 | "
             "with loading s | pairs/s | device-s per 1,000 |", "|---|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {name} | {where} | {p:,} | {c012(c)} | {r:,.1f} | {per(p, r)} | {(lw or 0):,.1f} | {per(lp, lw)} |"
              for name, p, r, (lp, lw), where, _, c in rows]
    for device in dict.fromkeys(r[5] for r in rows):  # one total per device class: their rates do not add up
        g = [r for r in rows if r[5] == device]
        gp, gr = sum(r[1] for r in g), sum(r[2] for r in g)
        lp, lw = sum(r[3][0] for r in g), sum(r[3][1] or 0 for r in g)
        lines.append(f"| all on it | {device} | {gp:,} | {c012(total(g))} | {gr:,.1f} | {per(gp, gr)} | {lw:,.1f} | "
                     f"{per(lp, lw)} |")
    lines.append(f"| all shards | – | {n:,} | {c012(total(rows))} | "
                 "– | – | – | – | – | – |")
    if args.data and (labels / "dev" / "manifest.json").is_file():
        lines += [""] + judge_check(labels, args.data, Path(args.reference) if args.reference else None)
    text = "\n".join(lines) + "\n"
    if args.out:
        Path(args.out).write_text(text)
    print(text)
    return 0


def verify(args) -> int:
    """Anywhere (this CPU too): rebuild the judge from a committed adapter exactly as `label` does, relabel the first
    --pairs pairs of a labelled split with it, and compare with the committed labels (argmax agreement, max |delta
    expected score|). ``--jitter`` first moves every adapter value by up to half its int8 step (uniform noise, a
    second rounding of the same size), so the same comparison says how far the int8 rounding itself can move labels."""
    import torch

    from r3edge.core.labels import read_labels
    from r3edge.core.pairs import write_queries
    from r3edge.distill.data.datasets import sample_queries, semeval_queries
    from r3edge.distill.label.driver import label_pairs

    adapter, work = Path(args.adapter), Path(args.work)
    carried = join_folder(adapter, "adapter", work)
    if args.jitter:
        from safetensors.torch import load_file, save_file

        t = load_file(carried / ADAPTER_FILE)
        g = torch.Generator().manual_seed(args.jitter)
        for name in [n for n in t if n.endswith(".scale")]:
            q = name[:-6] + ".q"
            noise = (torch.rand(t[q].shape, generator=g) - 0.5)  # in steps: the dequantised value moves < scale / 2
            t[q] = t[q].float() + noise  # kept as a float "q": expand_adapter multiplies it by the scale
        save_file(t, carried / ADAPTER_FILE, metadata={"codec": ADAPTER_CODEC + ", jittered"})
    report = json.loads((adapter / "sft_report.json").read_text())
    judge = work / "judge"
    t0 = time.time()
    rebuild_judge(sft_config(False), carried, judge, report)
    rebuilt_s = time.time() - t0
    ref = Path(args.labels)
    rows = {(r["qid"], r["docid"]): r for r in read_labels(ref).to_pylist()}
    qs, n = [], 0
    # C dev in the order the labelled fid/dev.jsonl holds it (write_fidelity_pairs: every question, seed 0)
    for q in sample_queries(semeval_queries(args.data, "C", "dev"), None, 0):
        q.candidates = [c for c in q.candidates if (q.qid, c.docid) in rows][: args.pairs - n]
        if q.candidates:
            qs.append(q)
            n += len(q.candidates)
        if n >= args.pairs:
            break
    write_queries(work / "pairs.jsonl", qs)
    t0 = time.time()
    label_pairs_out = work / ("labels-jitter" if args.jitter else "labels")
    label_pairs(work / "pairs.jsonl", sft_config(False).teacher, label_pairs_out, teacher_model=judge,
                batch_size=args.batch_size, shard_size=args.batch_size, overwrite=True, stream=sys.stdout)
    want = (adapter / "adapter.sha256").read_text().split()[0]  # join_folder checked it
    result = {"adapter_sha256": want, "jitter_seed": args.jitter or None, **compare_labels(label_pairs_out, ref),
              "rebuild_s": round(rebuilt_s, 1), "label_s": round(time.time() - t0, 1),
              "judge_sha256": weights_sha256(judge), "torch": torch.__version__,
              "device": "cuda" if torch.cuda.is_available() else "cpu"}
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


def compare_labels(a_dir: Path, b_dir: Path) -> dict:
    """Two labellings of the same pairs (every pair of a, looked up in b): argmax agreement and |delta expected score|."""
    import numpy as np

    from r3edge.core.labels import read_labels, read_manifest

    values = np.asarray(read_manifest(a_dir)["label_values"], dtype=np.float64)
    b = {(r["qid"], r["docid"]): r["probs"] for r in read_labels(b_dir).to_pylist()}
    got = read_labels(a_dir).to_pylist()
    pa = np.asarray([r["probs"] for r in got])
    pb = np.asarray([b[(r["qid"], r["docid"])] for r in got])
    d = np.abs(pa @ values - pb @ values)
    return {"pairs": len(got), "argmax_agreement": float((pa.argmax(1) == pb.argmax(1)).mean()),
            "max_abs_delta_expected_score": float(d.max()), "mean_abs_delta_expected_score": float(d.mean())}


def compare(args) -> int:
    result = {"a": args.a, "b": args.b, **compare_labels(Path(args.a), Path(args.b))}
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


def same_judge(args) -> int:
    """Before a CPU sitting labels (label_cpu.sh): the judge rebuilt on this box (`verify`'s report) must have the
    weights the cold start recorded (its call's run.json), or the shard would hold another judge's labels."""
    got = json.loads(Path(args.verify).read_text())["judge_sha256"]
    want = json.loads(Path(args.cold_start).read_text())["steps"]["cold_start"]["judge_sha256"]
    if got != want:
        raise SystemExit(f"the rebuilt judge's weights sha256 {got} ({args.verify}) is not the cold start's {want} "
                         f"({args.cold_start}): these would be another judge's labels; rebuild it with `verify`")
    print(f"judge weights sha256 {got[:12]}… = the cold start's")
    return 0


def sitting(args) -> int:
    """After a CPU sitting (label_cpu.sh): refuse a shard whose teacher config is not the reference shard's (`r3edge
    label --merge` would refuse to merge it), then append one record to the sittings log: the machine, the pairs
    before and after, the rate with the judge's loading, and the labels written so far (0/1/2, as `judge_check`
    counts them)."""
    import torch

    from r3edge.core.hardware import cpu_flags, cpu_model
    from r3edge.core.labels import read_labels, read_manifest

    labels = Path(args.labels)
    man, ref = read_manifest(labels), read_manifest(args.reference)
    if man["teacher_config_sha256"] != ref["teacher_config_sha256"]:
        raise SystemExit(f"{labels}'s teacher config {man['teacher_config_sha256']} is not {args.reference}'s "
                         f"{ref['teacher_config_sha256']}: the judge was not at the reference's path, and `r3edge label "
                         "--merge` would refuse this shard; label it again with the judge there")
    scores = read_labels(labels, allow_partial=True, columns=["score"]).column("score").to_pylist()
    rec = {"ended": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "shard": labels.name, "cpu": cpu_model(),
           "cpu_flags": cpu_flags(), "cores": len(os.sched_getaffinity(0)), "torch": torch.__version__,
           "pairs_before": args.before, "pairs_after": len(scores), "of": man["n_pairs"],
           "complete": bool(man.get("complete")), "wall_s": args.wall,
           "pairs_per_s": round((len(scores) - args.before) / max(args.wall, 1), 3), "exit": args.exit,
           "labels_0_1_2": [scores.count(k) for k in (0, 1, 2)],
           "judge_sha256": json.loads(Path(args.verify).read_text())["judge_sha256"],
           "teacher_config_sha256": man["teacher_config_sha256"]}
    with open(args.log, "a") as fh:
        fh.write(json.dumps(rec) + "\n")
    print(json.dumps(rec))
    return 0


def judge_check(labels: Path, data: str, reference: Path | None) -> list[str]:
    """The cold start's check: its C dev labels against gold, beside a reference judge's committed labels of the same
    pairs (the 0.490 judge), and how often the two judges give the same label on C dev and C train. The cold start
    stops on a time cap, so it is a new judge: this says whether it ranks as the one the card cites."""
    from judge_semeval_slice import judge_metrics

    from r3edge.core.labels import read_labels
    from r3edge.distill.data.datasets import semeval_queries

    dev = semeval_queries(data, "C", "dev")  # every C dev question, as labelled (fid/dev.jsonl holds them all)
    judges = {"this cold start": labels} | ({f"reference ({reference.parent.name})": reference} if reference else {})
    lines = ["## The judge on C dev (gold labels of every pair; nDCG@10 over the questions with a relevant comment)", "",
             "| judge | C dev nDCG@10 | accuracy | macro-F1 | ECE | labels 0/1/2 on C dev | labels 0/1/2 on C train |",
             "|---|---:|---:|---:|---:|---|---|"]
    for name, d in judges.items():
        m = judge_metrics(d / "dev", dev)
        train = read_labels(d / "train").column("score").to_pylist() if (d / "train").is_dir() else []
        dist = "/".join(str(m["labels"].get(k, 0)) for k in ("0", "1", "2"))
        tdist = "/".join(str(train.count(k)) for k in (0, 1, 2)) if train else "–"
        lines.append(f"| {name} | {m['ndcg@10']:.3f} | {m['accuracy']:.3f} | {m['f1_macro']:.3f} | {m['ece']:.3f} | "
                     f"{dist} | {tdist} |")
    if reference:
        lines.append("")
        for split in ("dev", "train"):
            if (labels / split).is_dir() and (reference / split).is_dir():
                a, b = ({(r["qid"], r["docid"]): r["score"] for r in read_labels(judge / split).to_pylist()}
                        for judge in (labels, reference))
                same = sum(a[k] == b.get(k) for k in a)
                lines.append(f"- The two judges give the same label to {same:,} of {len(a):,} C {split} pairs "
                             f"({same / len(a):.1%}).")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("cold-start", "label", "students", "flush"):
        p = sub.add_parser(name)
        p.add_argument("--work", required=True, help="the machine's working folder (kept while the machine is held)")
        p.add_argument("--out", required=True, help="$OUT: what comes back")
        p.add_argument("--pairs", help="the 100k pairs JSONL")
        p.add_argument("--gguf-dir", help="folder holding the reassembled GGUF as p00 (the stand-in packages' part)")
        p.add_argument("--stubs", default="/tmp/r3edge-stubs")
        p.add_argument("--shards", type=int, default=SHARDS)
        p.add_argument("--shard-s", type=float, default=75.0,
                       help="a shard's time before one has been timed: ~20,000 pairs at the 0.490 run's 333 pairs/s "
                            "(60 s) and the judge's loading (~9 s), so a call never starts a shard it cannot finish")
        p.add_argument("--budget-s", type=float, default=540.0, help="seconds this call may use (a device call: 600)")
        p.add_argument("--reserve-s", type=float, default=20.0, help="kept for shipping and exit")
        p.add_argument("--done", help="a file naming the shards complete in earlier sessions (prepare.sh writes it)")
        p.add_argument("--max-shards", type=int, default=-1, help="shards this call labels at most (-1: no limit)")
        p.add_argument("--batch-size", type=int, default=128, help="pairs per forward pass (the 0.490 run's 128)")
        p.add_argument("--chunk", type=int, default=512, help="pairs per written label chunk (label_pairs' shard_size)")
        p.add_argument("--smoke", action="store_true", help="random 2-layer Qwen2 on this machine, 50 pairs")
        p.add_argument("--sft", default=SFT_CONFIG, help="the judge's cold-start config (configs/sft/)")
        if name == "cold-start":
            p.add_argument("--gold", required=True, help="the cold start's gold pairs (every A and C train question)")
            p.add_argument("--also", nargs="*", default=[], metavar="PAIRS",
                           help="pairs files labelled before the shards, each into labels/<stem>: C dev (the judge's "
                                "check against the 0.490 judge) and C train (the same judge's 6.7k labels)")
        if name == "label":
            p.add_argument("--adapter", required=True, help="folder with adapter.tar.NN, adapter.sha256, sft_report.json")
        if name == "students":
            p.add_argument("--committed", help="labels folders of earlier sessions (dev, train, shard-*), carried")
            p.add_argument("--config", default=MINILM_CONFIG)
            p.add_argument("--after-train-s", type=float, default=40.0, help="kept for the C dev eval and the pieces")
            p.add_argument("--seeds", type=int, default=3,
                           help="train.seed 0 .. N-1 of each arm while the time lasts (seed 0's weights come back)")
    p = sub.add_parser("unpack")
    p.add_argument("--files", required=True, help="the reply's files_at")
    p.add_argument("--to", required=True)
    p = sub.add_parser("verify")
    p.add_argument("--adapter", required=True, help="a committed adapter folder (adapter.tar.NN, adapter.sha256, ...)")
    p.add_argument("--labels", required=True, help="the committed labels that judge gave (e.g. labels/dev)")
    p.add_argument("--data", required=True, help="../shared/data/semeval2016-cqa: C dev, the pairs those labels are of")
    p.add_argument("--pairs", type=int, default=64, help="how many to relabel (a 2-core CPU: ~1-4 s a pair)")
    p.add_argument("--work", required=True)
    p.add_argument("--jitter", type=int, default=0, help="a seed: move each adapter value by < half its int8 step")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--out")
    p = sub.add_parser("compare")
    p.add_argument("a", help="a labels folder (every pair of it is compared)")
    p.add_argument("b", help="another labelling of the same pairs (e.g. verify's plain and --jitter runs)")
    p.add_argument("--out")
    p = sub.add_parser("report")
    p.add_argument("--labels", required=True)
    p.add_argument("--cpu-labels", nargs="*", metavar="DIR",
                   help="label_cpu.sh's labels folders (sittings.jsonl beside each): their complete shards, as rows")
    p.add_argument("--out")
    p.add_argument("--data", help="../shared/data/semeval2016-cqa: C dev's gold labels, for the judge's check")
    p.add_argument("--reference", help="a reference judge's labels folder (dev/, train/) to set beside this one")
    p = sub.add_parser("same-judge")
    p.add_argument("--verify", required=True, help="verify's report of the judge rebuilt on this box")
    p.add_argument("--cold-start", required=True, help="the cold start's run.json (steps.cold_start.judge_sha256)")
    p = sub.add_parser("sitting")
    p.add_argument("--labels", required=True, help="the shard's labels folder as the sitting left it (may be partial)")
    p.add_argument("--reference", required=True, help="a shard the cold start's machine labelled (its teacher config)")
    p.add_argument("--verify", required=True, help="verify's report of the judge that labelled (its weights' sha256)")
    p.add_argument("--log", required=True, help="the sittings log (JSON lines) to append to")
    p.add_argument("--before", type=int, required=True, help="pairs the shard held before the sitting")
    p.add_argument("--wall", type=int, required=True, help="the sitting's wall seconds")
    p.add_argument("--exit", type=int, required=True, help="r3edge label's exit status (124: stopped at the limit)")
    args = ap.parse_args()
    steps = {"cold-start": cold_start, "label": label, "students": students, "flush": flush, "unpack": unpack,
             "verify": verify, "compare": compare, "report": report, "same-judge": same_judge, "sitting": sitting}
    return steps[args.cmd](args)


if __name__ == "__main__":
    raise SystemExit(main())
