package store

// Event actions, numbered as GitLab numbers them. The number is what the
// indexes store.
const (
	ActionCreated   = "created"
	ActionUpdated   = "updated"
	ActionClosed    = "closed"
	ActionReopened  = "reopened"
	ActionPushed    = "pushed"
	ActionCommented = "commented"
	ActionMerged    = "merged"
	ActionJoined    = "joined"
	ActionLeft      = "left"
	ActionDestroyed = "destroyed"
	ActionExpired   = "expired"
	ActionApproved  = "approved"
)

// EventActions are the actions an event may have, in code order.
var EventActions = []string{ActionCreated, ActionUpdated, ActionClosed, ActionReopened, ActionPushed,
	ActionCommented, ActionMerged, ActionJoined, ActionLeft, ActionDestroyed, ActionExpired, ActionApproved}

func actionCode(a string) byte {
	for i, x := range EventActions {
		if x == a {
			return byte(i + 1)
		}
	}
	return 0
}

// Target types as stored (class names), with their code in the indexes.
const (
	TargetIssue        = "Issue"
	TargetMergeRequest = "MergeRequest"
	TargetMilestone    = "Milestone"
	TargetNote         = "Note"
	TargetDiffNote     = "DiffNote"
	TargetDiscussion   = "DiscussionNote"
	TargetProject      = "Project"
	TargetSnippet      = "Snippet"
	TargetUser         = "User"
	TargetWiki         = "WikiPage::Meta"
	TargetDesign       = "DesignManagement::Design"
	TargetEpic         = "Epic"
)

var targetTypes = []string{TargetIssue, TargetMergeRequest, TargetMilestone, TargetNote, TargetDiffNote,
	TargetDiscussion, TargetProject, TargetSnippet, TargetUser, TargetWiki, TargetDesign, TargetEpic}

func targetCode(t string) byte {
	if t == "" {
		return 0
	}
	for i, x := range targetTypes {
		if x == t {
			return byte(i + 1)
		}
	}
	return 0xFF
}

// EventTargetFilters maps the values of the target_type filter (the spec's
// list plus GitLab's wiki and design) to the class they select. The match is
// exact, as GitLab's: note selects Note, not DiffNote.
var EventTargetFilters = map[string]string{
	"epic": TargetEpic, "issue": TargetIssue, "merge_request": TargetMergeRequest, "milestone": TargetMilestone,
	"note": TargetNote, "project": TargetProject, "snippet": TargetSnippet, "user": TargetUser,
	"wiki": TargetWiki, "design": TargetDesign,
}

// NormalizeTargetType accepts a class name (Issue, MergeRequest, ...) or a
// filter name (issue, merge_request, ...) and returns the class name, or ""
// and false when it is neither.
func NormalizeTargetType(t string) (string, bool) {
	if targetCode(t) != 0xFF {
		return t, true
	}
	if c, ok := EventTargetFilters[t]; ok {
		return c, true
	}
	return "", false
}
