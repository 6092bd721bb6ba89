"""The device side: model runner, sampler and the per-step batch tensors they share."""
