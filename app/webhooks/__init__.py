"""Webhooks: HMAC-signed, retried deliveries of job and campaign events."""
