-- Expected verdict: RE. Syntactically valid, but the table `employee` does not exist
-- (error 1146): the statement parses and then fails.
UPDATE employee
SET salary = LEAST(ROUND(salary * 1.10, 2), 9000.00)
WHERE department_id = 1
  AND hired_on < '2020-01-01'
  AND salary < 9000.00;
