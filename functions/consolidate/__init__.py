"""The consolidate function: the hourly schedule and CompactionDue events from the bus."""
