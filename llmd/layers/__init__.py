"""Model building blocks shared by every architecture: norms, activations, rotary, attention."""
