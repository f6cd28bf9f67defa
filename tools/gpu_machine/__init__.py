"""flash-attn-4 onto the offline GPU machine (staging in carry-sized parts), a smoke test of it
there, and the FA2-API shim nano-vllm runs on (see README.md here)."""
