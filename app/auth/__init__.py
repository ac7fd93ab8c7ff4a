"""API keys, roles (admin > platform > reader) and the dependencies that enforce them."""
