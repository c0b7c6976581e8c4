"""C train's committed labels without the pairs that carry C dev content, by the rules `r3edge pairs --semeval` uses
(`DevContent` in distill/data/datasets.py, the rules of semeval_train_collection): a question whose text is a dev
question's, a comment of a thread whose question is a dev question, a comment whose titled text is a dev comment's."""
import sys
from collections import Counter
from pathlib import Path

from r3edge.core.labels import read_labels, read_manifest, write_manifest, write_shard
from r3edge.distill.data.datasets import DevContent

data, src, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
rules = DevContent.of(data)
rows = read_labels(src).to_pylist()
why = Counter()
kept = []
for r in rows:
    reason = rules.question(r["query"]) or rules.comment(r["docid"], r["text"])  # C's comments are titled
    if reason:
        why[reason] += 1
    else:
        kept.append(r)
out.mkdir(parents=True)
for i in range(0, len(kept), 512):
    write_shard(out, kept[i:i + 512])
m = read_manifest(src)
write_manifest(out, {**m, "n_pairs": len(kept), "n_done": len(kept), "complete": True,
                     "filtered_from": str(src), "left_out": dict(why)})
print({"source": len(rows), "kept": len(kept), "left_out": dict(why),
       "questions": len({r["qid"] for r in kept})})
