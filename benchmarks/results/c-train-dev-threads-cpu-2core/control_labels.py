"""The size control for clean_labels.py: C train's committed labels less as many pairs, taken as whole random threads
(seeded), none of them the dev threads or the dev-text question (those stay in)."""
import random
import sys
from collections import defaultdict
from pathlib import Path

from r3edge.core.labels import read_labels, read_manifest, write_manifest, write_shard

src, clean, out, seed = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])
rows = read_labels(src).to_pylist()
kept_clean = {(r["qid"], r["docid"]) for r in read_labels(clean, columns=["qid", "docid"]).to_pylist()}
n_drop = len(rows) - len(kept_clean)
threads = defaultdict(list)  # (qid, thread) -> rows, only threads the clean filter kept whole
for r in rows:
    threads[(r["qid"], r["docid"].rsplit("_", 1)[0])].append(r)
eligible = [k for k, v in threads.items() if all((r["qid"], r["docid"]) in kept_clean for r in v)]
random.Random(seed).shuffle(eligible)
drop, n = set(), 0
for k in eligible:
    if n >= n_drop:
        break
    drop.add(k)
    n += len(threads[k])
kept = [r for r in rows if (r["qid"], r["docid"].rsplit("_", 1)[0]) not in drop]
out.mkdir(parents=True)
for i in range(0, len(kept), 512):
    write_shard(out, kept[i:i + 512])
write_manifest(out, {**read_manifest(src), "n_pairs": len(kept), "n_done": len(kept), "complete": True,
                     "filtered_from": str(src), "control": f"{len(drop)} random threads ({n} pairs) left out, seed {seed}"})
print({"source": len(rows), "kept": len(kept), "threads_dropped": len(drop), "pairs_dropped": n,
       "questions": len({r["qid"] for r in kept})})
