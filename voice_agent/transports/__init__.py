"""Where calls come from: `phone` (Twilio/Telnyx media-stream websocket) and `mic` (local audio).
Each builds the one shared pipeline (`voice_agent.pipeline.build_pipeline`) on its transport."""
