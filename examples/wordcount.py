"""Word count: split lines into words, and count them.

    engine worker -A examples.wordcount:app
    engine send -A examples.wordcount:app lines "the quick brown fox"
"""

import engine

app = engine.App("wordcount", broker="kafka://localhost:9092")
lines = app.topic("lines", value_type=str)
words = app.topic("words", key_type=str, value_type=int)
counts = app.topic("word-counts", key_type=str, value_type=int)

# Counts kept by this worker for the words of its partitions (tables replace this dict; see the tables issue).
totals: dict[str, int] = {}


@app.agent(lines, concurrency=2)
async def split(stream):
    async for line in stream:
        for word in line.lower().split():
            await words.send(key=word, value=1)


@app.agent(words)
async def count(stream):
    async for word, n in stream.items():
        totals[word] = totals.get(word, 0) + n
        await counts.send(key=word, value=totals[word])
