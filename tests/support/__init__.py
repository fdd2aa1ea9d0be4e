"""What several tests share: fixtures' helpers, probes and data builders."""
