"""A stand-in for facebookresearch/SentEval in tests: same entry point (`senteval.engine.SE`),
same task_path rule and the same result layout per task, numbers from a trivial computation.
Put tests/fake_senteval on sys.path to make `import senteval` find it."""
