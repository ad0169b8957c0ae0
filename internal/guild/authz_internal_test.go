package guild

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// twins are the operations served by another's method, which checks that
// other's row: every HEAD operation by its GET's, two legacy paths by the
// operations that replaced them.
var twins = map[Op]Op{
	opHeadOpenAPIYAML:       opGetOpenAPIYAML,
	opHeadOpenAPIJSON:       opGetOpenAPIJSON,
	opHeadChannels:          opListChannels,
	opHeadChannel:           opGetChannel,
	opHeadChannelOverwrites: OpListChannelOverwrites,
	opHeadChannelAccess:     OpListChannelAccess,
	opHeadAttachments:       opListAttachments,
	opHeadAttachment:        opGetAttachment,
	opHeadPermissions:       opListPermissions,
	opHeadGlobalPermissions: opGetGlobalPermissions,
	opHeadUserPermissions:   OpGetUserPermissions,
	opHeadExportTemplate:    opExportTemplate,
	opHeadRoles:             OpListRoles,
	opHeadRole:              opGetRole,
	opHeadRoleMembers:       opListRoleMembers,
	opHeadRolePermissions:   opGetRolePermissions,
	opLegacyAddRoleUser:     opAssignUserRole,
	opLegacyRemoveRoleUser:  opRemoveUserRole,
	opHeadMe:                opGetMe,
	opHeadUsers:             opListUsers,
	opHeadUser:              opGetUser,
	opHeadUserRoles:         opListUserRoles,
	opHeadTokens:            opListTokens,
	opHeadToken:             opGetToken,
	opHeadProfileLinks:      opGetProfileLinks,
	opHeadAuditLog:          opListAuditLog,
	opHeadEvents:            opStreamEvents,
	opHeadWebhooks:          OpListWebhooks,
	opHeadWebhook:           OpGetWebhook,
	opHeadWebhookDeliveries: OpListWebhookDeliveries,
}

// TestEveryRowIsChecked: each row of the table is named op + its
// operationId (Op + it when a feature package under internal/guild checks
// it), and the service's code checks it (names it outside the table), unless the operation is public (served without the service) or
// served by a twin's method, whose row is then the same.
func TestEveryRowIsChecked(t *testing.T) {
	fset := token.NewFileSet()
	// The feature packages under internal/guild check exported rows.
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	features, err := filepath.Glob("*/*.go")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, features...)
	declared := map[string]string{} // row variable -> operationId
	used := map[string]bool{}       // identifiers named outside the table
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		if name == "authz.go" {
			collectRows(f, declared)
			continue
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if id, ok := n.(*ast.Ident); ok && strings.HasPrefix(strings.ToLower(id.Name), "op") {
				used[id.Name] = true
			}
			return true
		})
	}
	if len(declared) != len(requirements) {
		t.Fatalf("authz.go declares %d rows, the table holds %d", len(declared), len(requirements))
	}
	byID := map[string]Op{}
	for _, r := range requirements {
		byID[r.OperationID] = Op{r}
	}
	for v, id := range declared {
		// Op... when a feature package under internal/guild checks it.
		if want := strings.ToUpper(id[:1]) + id[1:]; v != "op"+want && v != "Op"+want {
			t.Errorf("the row of %s is %s, want op%s", id, v, want)
		}
		op := byID[id]
		twin, isTwin := twins[op]
		switch {
		case isTwin:
			if rowString(op) != rowString(twin) {
				t.Errorf("%s is served by %s's method but their rows differ: %s and %s", id, twin, rowString(op), rowString(twin))
			}
		case op.Scope == ScopePublic:
		case !used[v]:
			t.Errorf("no code checks the row of %s (%s is named only in the table)", id, v)
		}
	}
}

// collectRows finds the table's rows in authz.go: variables initialized by
// row(id, ...), maybe followed by .field(...) or .anyOf(...).
func collectRows(f *ast.File, rows map[string]string) {
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.VAR {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			if len(vs.Values) != 1 {
				continue
			}
			call, ok := vs.Values[0].(*ast.CallExpr)
			for ok {
				if fn, isIdent := call.Fun.(*ast.Ident); isIdent && fn.Name == "row" {
					id, _ := strconv.Unquote(call.Args[0].(*ast.BasicLit).Value)
					rows[vs.Names[0].Name] = id
					break
				}
				sel, isSel := call.Fun.(*ast.SelectorExpr)
				if !isSel {
					break
				}
				call, ok = sel.X.(*ast.CallExpr)
			}
		}
	}
}

// rowString is what a row requires, without its operation's name.
func rowString(op Op) string {
	return fmt.Sprint(op.Permissions.Names(), op.AnyOf.Names(), op.Scope, op.Rule, op.Fields)
}
