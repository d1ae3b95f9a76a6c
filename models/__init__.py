"""Models of cryptowire: the sentiment classifier (`models.sentiment`) and tagging (`models.tagging`).

Never imports dagster or the API."""
