"""Run main_logical.py on a CPU (the authors' code exits without CUDA): .cuda() becomes a no-op.
Only for a dry run here; the card runs main_logical.py itself."""
import runpy, sys
import torch
torch.Tensor.cuda = lambda self, *a, **k: self
torch.nn.Module.cuda = lambda self, *a, **k: self
sys.argv = ["main_logical.py"] + sys.argv[1:]
runpy.run_path("main_logical.py", run_name="__main__")
