"""Model implementations (Llama, Mistral, Qwen2, Qwen3), their registry and the loader."""
