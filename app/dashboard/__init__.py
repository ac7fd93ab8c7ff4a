"""The admin dashboard: server-rendered pages whose scripts call the JSON API with the API key."""
