"""A fake OpenAI-compatible inference engine with a known latency law, for ``tailhound loadtest`` and its tests.

The server (:mod:`.server`), its law (:mod:`.law`), what it reads and writes on the OpenAI API
(:mod:`.openai_wire`), and running it in a thread or from the command line (:mod:`.serve`).
"""

from .law import EngineLaw
from .serve import serve_in_thread
from .server import FakeEngine

__all__ = ["EngineLaw", "FakeEngine", "serve_in_thread"]
