"""Each store's writes: ``delta`` (the lake's tables) and ``postgres`` (sessions and staging)."""
