"""What the API's ``demo`` and ``verify`` run: every reference model on every backend, or one model on one backend,
compared with eager PyTorch. (Not named ``fusedops.demo`` / ``fusedops.verify``: those are the API functions.)"""
