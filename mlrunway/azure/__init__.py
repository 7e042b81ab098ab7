"""The Azure ML backend, through azure-ai-ml (SDK v2). Imported only when a connection asks for it."""
