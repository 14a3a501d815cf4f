"""The papers' analyses as functions of a unit and data: gradient flow through the
recurrence (`gradients`), per-token role readouts (`readout`), UD treebank reading (`conllu`),
role/tag agreement and probes (`probe`). The CLI commands live in harness/commands/."""
