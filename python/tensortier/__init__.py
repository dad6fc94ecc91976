"""tensortier: object-level tiering of DNN training tensors across heterogeneous memory.

tensortier.torch runs an unmodified PyTorch training loop's CPU tensors on tiers (see its doc).
"""
