package labplan

// Process is one supervised child of the lab.
type Process struct {
	Name   string   // also the log file's name
	Argv   []string // run as is; processes in a node's netns are wrapped in nsenter
	Health string   // URL that answers 200 once the process is ready ("" = running is enough)
}
