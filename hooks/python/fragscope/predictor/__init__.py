"""The predictor: a job's training or inference step run under fake tensors through fragscope's
allocator on a simulated device, written as an .fslog (README.md here lists the modules).

Its public entry points are fragscope.predict and fragscope.predict_hf, and `python -m fragscope
predict|carry|fit` (cli.py). The subpackage is not named `predict`: importing a submodule
fragscope.predict.X would bind the package's attribute `predict` to the subpackage, in place of
the function.
"""
