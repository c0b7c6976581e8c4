"""The label sets of this folder, each written from committed labels of the cold-started 0.490 judge
(`../judge-qwen-coder-cold-start-lora-h100/labels/`) as a complete labels directory that `r3edge train` reads.

    labels_for.py a-clean DATA A_TRAIN OUT     subtask A train's labels without dev content, by the rules of
                                               `r3edge pairs --semeval` (A's comments are titled with their
                                               thread's subject before the dev-comment check, as pooling does)
    labels_for.py merge OUT SRC [SRC ...]      the rows of several labels directories in one (same judge and prompt)
    labels_for.py questions SRC OUT N SEED     N whole questions of SRC, the first N of a seeded shuffle (so a
                                               smaller N of one seed is a subset of a larger one)
    labels_for.py gold SRC OUT SMOOTHING       SRC's pairs with the gold label as the teacher's distribution
                                               (1 - SMOOTHING on it, the rest spread evenly): a perfect teacher's
                                               labels of the same pairs, as base_preservation.py's gold proxy
"""
import random
import sys
from pathlib import Path

from r3edge.core.labels import read_labels, read_manifest, write_manifest, write_shard
from r3edge.distill.data.datasets import DevContent, _titled


def write(out: Path, rows: list[dict], manifest: dict, **extra) -> None:
    out.mkdir(parents=True)
    for i in range(0, len(rows), 512):
        write_shard(out, rows[i:i + 512])
    write_manifest(out, {**manifest, "n_pairs": len(rows), "n_done": len(rows), "complete": True, **extra})
    print({"out": str(out), "pairs": len(rows), "questions": len({r["qid"] for r in rows}), **extra})


mode, args = sys.argv[1], sys.argv[2:]
if mode == "a-clean":
    data, src, out = args[0], Path(args[1]), Path(args[2])
    rules = DevContent.of(data)
    kept, why = [], {}
    for r in read_labels(src).to_pylist():
        subject = r["query"].split("\n", 1)[0].strip()  # subtask A: the query is the thread's own question
        reason = rules.question(r["query"]) or rules.comment(r["docid"], _titled(r["text"], subject), r["query"])
        if reason:
            why[reason] = why.get(reason, 0) + 1
        else:
            kept.append(r)
    write(out, kept, read_manifest(src), filtered_from=str(src), left_out=why)
elif mode == "merge":
    out, srcs = Path(args[0]), [Path(s) for s in args[1:]]
    manifests = [read_manifest(s) for s in srcs]
    for key in ("teacher_model", "prompt_hash", "label_values"):
        if len({str(m[key]) for m in manifests}) != 1:
            sys.exit(f"{key} differs between {', '.join(map(str, srcs))}: merge labels of one judge and prompt only")
    rows = [r for s in srcs for r in read_labels(s).to_pylist()]
    if len({(r["qid"], r["docid"]) for r in rows}) != len(rows):
        sys.exit("a (qid, docid) pair is in two sources")
    write(out, rows, {**manifests[0], "pairs_file": None, "pairs_sha256": None}, merged_from=[
        {"dir": str(s), "pairs_file": m["pairs_file"], "pairs_sha256": m["pairs_sha256"], "n_pairs": m["n_pairs"]}
        for s, m in zip(srcs, manifests)])
elif mode == "questions":
    src, out, n, seed = Path(args[0]), Path(args[1]), int(args[2]), int(args[3])
    rows = read_labels(src).to_pylist()
    qids = sorted({r["qid"] for r in rows})
    random.Random(seed).shuffle(qids)
    keep = set(qids[:n])
    write(out, [r for r in rows if r["qid"] in keep], read_manifest(src), filtered_from=str(src),
          questions_of=f"the first {n} of {len(qids)} questions shuffled with seed {seed}")
elif mode == "gold":
    src, out, smoothing = Path(args[0]), Path(args[1]), float(args[2])
    manifest = read_manifest(src)
    n = manifest["n_labels"]
    rows = []
    for r in read_labels(src).to_pylist():
        probs = [smoothing / (n - 1)] * n
        probs[r["gold"]] = 1 - smoothing
        rows.append({**r, "judge": "gold-proxy", "probs": probs, "score": r["gold"], "native_score": float(r["gold"])})
    write(out, rows, {**manifest, "judge": "gold-proxy", "teacher": None}, filtered_from=str(src),
          gold_proxy=f"gold labels as the teacher's distribution, smoothing {smoothing}")
else:
    sys.exit(__doc__)
