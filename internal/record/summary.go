package record

// SummaryReport is the Data of a summary event (EventSummary): an
// xrd.report's statistics header and every value, by dotted name
// (docs/records.md, "Summaries").
type SummaryReport struct {
	Format string             `json:"format"` // xml or json
	Src    string             `json:"src"`    // host:port of the server
	Tod    int64              `json:"tod"`    // the server's time of the report, Unix s
	Tos    int64              `json:"tos"`    // the server's start time, Unix s
	Pid    int64              `json:"pid"`
	Pgm    string             `json:"pgm"`
	Ins    string             `json:"ins"`
	Site   string             `json:"site,omitempty"`
	Ver    string             `json:"ver"`
	Values map[string]float64 `json:"values"`
	Texts  map[string]string  `json:"texts,omitempty"`
}
