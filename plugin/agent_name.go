package main

// agentName is the binary that serves the sweeper's metrics: this program
// built with -tags agent, installed beside netns-pin.
const agentName = "netns-pin-agent"
