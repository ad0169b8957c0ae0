package httpapi

import (
	"encoding/json"

	"github.com/guildhall/guildhall/internal/model"
)

// EventJSON is an event exactly as the audit log shows it (an item of GET
// /api/audit-log, the data of an event stream's message): the body of a
// webhook's delivery.
func EventJSON(e model.Event) ([]byte, error) { return json.Marshal(toEvent(e)) }
