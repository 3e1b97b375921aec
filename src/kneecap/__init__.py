"""kneecap: LLM serving capacity — exact memory ledgers, trustworthy load sweeps, a simulated engine."""

__version__ = "0.1.0"
