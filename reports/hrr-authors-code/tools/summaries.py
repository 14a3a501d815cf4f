"""Print the gradient norms their trainer summarises (every 100 updates, lingvo/core/base_model.py):
the global norm before the clip (`grad_norm/all`), the clip's scale (`grad_scale_all` = min(1, 5 / norm))
and the norms per variable. Run with their environment's Python (it reads TF event files):

    DIR/venv/bin/python summaries.py LOGDIR/control/events.out.tfevents.*

Ours, not the authors': it only reads their summaries.
"""

import sys

import tensorflow as tf

KEEP = ("grad_norm/", "grad_scale_all", "sgd_lr", "lr_schedule")


def main(paths):
    rows = {}
    for path in paths:
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.tag.startswith(KEEP):
                    rows.setdefault(event.step, {})[value.tag] = value.simple_value
    tags = sorted({t for r in rows.values() for t in r})
    print("| step | " + " | ".join(tags) + " |")
    print("|---:|" + "---:|" * len(tags))
    for step in sorted(rows):
        print(f"| {step} | " + " | ".join(f"{rows[step][t]:.4g}" if t in rows[step] else "" for t in tags) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
