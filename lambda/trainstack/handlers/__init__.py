"""Lambda handlers: parse the event, call the core, make one AWS call, return a small dict."""
