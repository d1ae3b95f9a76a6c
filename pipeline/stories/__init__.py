"""Stories: articles from different sources (and re-posts within one) that report the same news, grouped."""
