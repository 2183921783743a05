"""The agent function: SQS FIFO batches of lane items in, one turn per item."""
