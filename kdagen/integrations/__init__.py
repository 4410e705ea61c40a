"""kdagen inside other libraries: `kdagen.integrations.fla` registers kdagen as a flash-linear-attention backend."""
