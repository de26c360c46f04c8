"""The live service: follows logs, scrapes vLLM, serves /metrics, the JSON API, the dashboard."""
