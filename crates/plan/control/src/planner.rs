//! The planner: pipeline text in, [`Plan`] out. It parses with the planner's resolver,
//! builds the request model, runs the optimizer (or the heuristic), and when the request
//! as written does not fit the CPUs, substitutes the data-parallel template
//! (`split | f + f ... | join`, [`lang::parallelize`]) for the heaviest filter and tries
//! again with 2, 3, ... ways up to the number of CPUs.

use lang::{Graph, SplitMode};

use crate::error::{Error, PlanError};
use crate::library::Filters;
use crate::model::{Catalog, Load, PlanResolver, Request, Role};
use crate::optimize;
use crate::plan::{Choice, Plan, SolverStats};
use crate::system::SystemModel;

/// Which algorithm to plan with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// The integer program, falling back to the heuristic if the solver fails.
    Optimal,
    /// Push processing down.
    Heuristic,
}

pub struct Planner {
    pub sys: SystemModel,
    pub catalog: Catalog,
    pub load: Load,
}

/// A plan with the request it was made for.
pub struct Planned {
    pub graph: Graph,
    pub request: Request,
    pub plan: Plan,
    /// The data-parallel template applied, if any: (node of the request as written, ways).
    pub template: Option<(usize, usize)>,
}

impl Planner {
    /// A planner for `sys` that knows the filters of `filters` (see [`Filters`]).
    pub fn new(sys: SystemModel, filters: Filters) -> Planner {
        Planner {
            sys,
            catalog: Catalog::new(filters),
            load: Load::default(),
        }
    }

    pub fn plan(&self, text: &str, method: Method) -> Result<Planned, Error> {
        let g = lang::parse(text, &PlanResolver(self.catalog.filters()))
            .map_err(|d| crate::RequestError::Parse(d.to_string()))?;
        self.plan_graph(&g, method)
    }

    fn solve(
        &self,
        req: &Request,
        method: Method,
    ) -> Result<(Vec<Choice>, SolverStats), PlanError> {
        match method {
            Method::Optimal => optimize::best(req, &self.sys),
            Method::Heuristic => optimize::push_down(req, &self.sys),
        }
    }

    pub fn plan_graph(&self, g: &Graph, method: Method) -> Result<Planned, Error> {
        let req = Request::from_graph(g, &self.catalog, self.load)?;
        match self.solve(&req, method) {
            Ok((choice, stats)) => {
                let plan = Plan::build(&req, &self.sys, &choice, stats);
                Ok(Planned {
                    graph: g.clone(),
                    request: req,
                    plan,
                    template: None,
                })
            }
            Err(PlanError::Infeasible(why)) => {
                // Template substitution: parallelize the heaviest filter.
                // Only a filter whose copies together do what one does, block by block,
                // may be replicated by the planner (round-robin, order restored).
                let per_block = |i: usize| {
                    !g.nodes[req.nodes[i].id].hints.contains(&lang::Hint::Single)
                        && match &g.nodes[req.nodes[i].id].kind {
                            lang::NodeKind::Filter { filter, .. } => {
                                self.catalog.filters().find(filter).is_some_and(|s| {
                                    s.replication == dataplane::Replication::Blocks
                                })
                            }
                            _ => false,
                        }
                };
                let heaviest = (0..req.nodes.len())
                    .filter(|&i| req.nodes[i].role == Role::Filter && per_block(i))
                    .max_by(|&a, &b| req.node_cycles(a, 0).total_cmp(&req.node_cycles(b, 0)));
                let mut why = why;
                if let Some(node) = heaviest {
                    if self.sys.cpus.len() >= 2 {
                        why += &format!(
                            "; the data-parallel template for '{}' did not fit either (tried 2..={} ways)",
                            req.nodes[node].label,
                            self.sys.cpus.len()
                        );
                    }
                    for ways in 2..=self.sys.cpus.len() {
                        let g2 = lang::parallelize(g, node, ways, SplitMode::RoundRobin);
                        let req2 = Request::from_graph(&g2, &self.catalog, self.load)?;
                        if let Ok((choice, mut stats)) = self.solve(&req2, method) {
                            stats.alternative = format!(
                                "template: '{}' data-parallel x{ways}",
                                req.nodes[node].label
                            );
                            let plan = Plan::build(&req2, &self.sys, &choice, stats);
                            return Ok(Planned {
                                graph: g2,
                                request: req2,
                                plan,
                                template: Some((node, ways)),
                            });
                        }
                    }
                }
                Err(PlanError::Infeasible(why).into())
            }
            Err(e) => Err(e.into()),
        }
    }
}
