"""Files senders attach (docs/media.md): fetched in the agent turn, stored in the MediaStore,
turned into model input. Fetching and storage: shared.media.fetch; ids: shared.media.ids."""
